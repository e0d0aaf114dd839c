"""The per-step log parser (kvcalc/validate/vllm_iterations.py) on a real excerpt of an H200 serve log."""
from pathlib import Path

from kvcalc.validate.vllm_iterations import Step, parse_line, parse_steps, wall_times, workloads

EXCERPT = Path(__file__).parent / "fixtures" / "vllm_iterations" / "llama-3.2-3b-fp8kv-iter.excerpt.log"


def test_steps_of_a_real_log():
    steps = parse_steps(EXCERPT.read_text())
    assert len(steps) == 3 + 16 + 21  # the routes and the JIT warning are not steps
    first = steps[0]
    assert first == Step(0, first.t, 1, 1024, 0, 0, 0.04, 0.0)
    # 12-02 01:57:38.186: 336 days after 1 January 2000 (a leap year: 335 to 1 December)
    assert abs(first.t - ((336 * 24 + 1) * 3600 + 57 * 60 + 38.186)) < 1e-6
    assert [s.index for s in steps[3:]] == list(range(3422, 3438)) + list(range(3471, 3492))
    mixed = next(s for s in steps if s.index == 3476)
    assert (mixed.context_requests, mixed.context_tokens, mixed.generation_requests, mixed.generation_tokens) == \
        (9, 8183, 9, 9)
    assert mixed.elapsed_ms == 41.97 and mixed.tokens == 8192
    assert abs(mixed.kv_usage - 0.012) < 1e-12


def test_wall_times_are_the_gaps_between_lines():
    steps = parse_steps(EXCERPT.read_text())
    gaps = wall_times(steps)
    assert len(gaps) == len(steps) - 1
    assert round(gaps[0] * 1e3) == 1 and round(gaps[1] * 1e3) == 2  # steps 1 and 2: 38.186 -> 38.187 -> 38.189


def test_workloads_split_at_idle_gaps():
    runs = workloads(parse_steps(EXCERPT.read_text()))
    # the first steps (01:57:38), the end of the previous run (01:57:54.187) and the c128 run (01:57:56.644 on)
    assert [len(r) for r in runs] == [3, 2, 35]
    assert runs[2][0].index == 3424 and runs[2][0].context_tokens == 1024


def test_other_lines_and_damaged_ones_are_not_steps():
    assert parse_line("(APIServer pid=594) INFO 12-02 01:57:36.804 [launcher.py:46] Route: /ping, Methods: POST") is None
    line = EXCERPT.read_text().splitlines()[2]
    assert parse_line(line) is not None
    assert parse_line(line.replace("1024 context tokens", "1O24 context tokens")) is None
    assert parse_line(line[:120]) is None
