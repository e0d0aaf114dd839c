"""GPU profiles: the shipped YAML files validate, names resolve, and bad input fails with a clear one-line message."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import yaml

from kvcalc.errors import UsageError
from kvcalc.hardware import GpuProfile, get_gpu, list_gpus, load_gpu_file

REQUIRED_IDS = {
    "t4", "l4", "a10g", "a100-40gb", "a100-80gb", "l40s", "h100-pcie", "h100-sxm", "h200",
    "rtx-3090", "rtx-4090", "b200", "mi300x",
}
PROFILE_DIR = resources.files("kvcalc") / "hardware_profiles"


def _shipped_files() -> list[str]:
    return sorted(p.name for p in PROFILE_DIR.iterdir() if p.name.endswith(".yaml"))


@pytest.mark.parametrize("filename", _shipped_files())
def test_every_shipped_profile_validates_and_is_named_after_its_id(filename):
    path = Path(str(PROFILE_DIR / filename))
    gpu = load_gpu_file(path)
    assert gpu.id == path.stem
    assert gpu.id == gpu.id.lower()
    # every number says where it came from
    for field in ("memory_total_bytes", "memory_bandwidth_bytes_per_s", "flops", "achievable_bandwidth_fraction"):
        assert gpu.sources.get(field), f"{filename}: sources.{field} missing"
    assert any(word in gpu.sources["memory_total_bytes"] for word in ("observed", "estimate"))
    assert "assumption" in gpu.sources["achievable_bandwidth_fraction"] or "measured" in gpu.sources[
        "achievable_bandwidth_fraction"
    ]


def test_required_ids_are_shipped_and_listed_sorted():
    ids = [g.id for g in list_gpus()]
    assert REQUIRED_IDS <= set(ids)
    assert ids == sorted(ids)
    assert len(ids) == len(_shipped_files())


def test_aliases_are_unique_across_gpus():
    owner: dict[str, str] = {}
    for g in list_gpus():
        for name in (g.id, *g.aliases):
            assert name not in owner or owner[name] == g.id, f"{name!r} used by {owner.get(name)} and {g.id}"
            owner[name] = g.id


@pytest.mark.parametrize("gpu", list_gpus(), ids=lambda g: g.id)
def test_driver_total_is_below_marketing_size(gpu):
    assert 0 < gpu.memory_total_bytes < gpu.memory_marketing_bytes
    # the driver keeps a few hundred MiB to a few GiB, never a large share
    assert gpu.memory_total_bytes > 0.85 * gpu.memory_marketing_bytes


@pytest.mark.parametrize("gpu", [g for g in list_gpus() if g.vendor == "nvidia"], ids=lambda g: g.id)
def test_nvidia_fp8_is_native_exactly_from_sm89_and_bf16_from_sm80(gpu):
    assert gpu.compute_capability is not None
    assert gpu.native_fp8 == (gpu.compute_capability >= 8.9)
    assert gpu.native_bf16 == (gpu.compute_capability >= 8.0)
    assert (gpu.flops_for("fp8") is not None) == gpu.native_fp8
    assert gpu.gfx is None


@pytest.mark.parametrize("gpu", list_gpus(), ids=lambda g: g.id)
def test_numbers_are_in_plausible_ranges(gpu):
    assert 100e9 <= gpu.memory_bandwidth_bytes_per_s <= 20e12
    assert 0.5 <= gpu.achievable_bandwidth_fraction <= 1
    assert gpu.achievable_bandwidth_bytes_per_s < gpu.memory_bandwidth_bytes_per_s
    fp16 = gpu.flops_for("fp16")
    assert fp16 is not None and 10e12 < fp16 < 20e15
    # dense tensor peaks: 16-bit math is at least fp32, fp8 (where native) at least 16-bit
    assert fp16 >= gpu.flops_for("fp32")
    if gpu.native_fp8:
        assert gpu.flops_for("fp8") >= gpu.flops_for("bf16")


def test_known_facts():
    t4 = get_gpu("t4")
    assert not t4.native_bf16 and not t4.native_fp8
    assert t4.flops_for("bf16") is None and not t4.supports_native("bfloat16")
    assert t4.supports_native("fp16") and t4.supports_native("float16")
    assert not t4.supports_native("fp8_e4m3") and not t4.supports_native("nf4")
    assert t4.memory_total_bytes == 15_828_320_256
    assert get_gpu("l4").memory_total_bytes == 23_661_969_408
    assert get_gpu("a100-40gb").memory_total_bytes == 42_298_834_944
    assert get_gpu("a100-80gb").memory_total_bytes == 85_097_971_712
    assert get_gpu("h100-sxm").memory_total_bytes == 85_029_158_912
    assert get_gpu("h100-sxm").memory_bandwidth_bytes_per_s == 3_350_000_000_000
    assert get_gpu("t4").memory_bandwidth_bytes_per_s == 320_000_000_000
    assert round(get_gpu("h200").memory_total_gib, 2) == 139.80
    assert get_gpu("a100").flops_for("fp8") is None
    assert get_gpu("l40s").supports_native("fp8") and get_gpu("h100").supports_native("float8_e4m3fn")
    mi = get_gpu("mi300x")
    assert mi.vendor == "amd" and mi.compute_capability is None and mi.gfx == "gfx942" and mi.native_fp8
    assert get_gpu("b200").supports_native("nvfp4") and not get_gpu("h100").supports_native("fp4")
    h = get_gpu("h100-sxm")
    assert h.achievable_bandwidth_bytes_per_s == pytest.approx(3.35e12 * h.achievable_bandwidth_fraction)


@pytest.mark.parametrize(
    "typed, expected",
    [
        ("H100", "h100-sxm"),
        ("h100", "h100-sxm"),
        ("H100 SXM", "h100-sxm"),
        ("h100_sxm", "h100-sxm"),
        ("  H100-SXM  ", "h100-sxm"),
        ("h100sxm", "h100-sxm"),
        ("H100 PCIe", "h100-pcie"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("a100", "a100-80gb"),
        ("A100 40GB", "a100-40gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie"),
        ("Tesla T4", "t4"),
        ("tesla-t4", "t4"),
        ("T4", "t4"),
        ("4090", "rtx-4090"),
        ("RTX 4090", "rtx-4090"),
        ("NVIDIA GeForce RTX 3090", "rtx-3090"),
        ("3090", "rtx-3090"),
        ("NVIDIA L4", "l4"),
        ("L40S", "l40s"),
        ("NVIDIA A10G", "a10g"),
        ("AMD Instinct MI300X", "mi300x"),
        ("MI300X", "mi300x"),
        ("B200", "b200"),
        ("H200", "h200"),
    ],
)
def test_get_gpu_by_alias_and_messy_spellings(typed, expected):
    assert get_gpu(typed).id == expected


def test_unknown_name_suggests_the_nearest():
    with pytest.raises(UsageError) as info:
        get_gpu("h10")
    message = str(info.value)
    assert "unknown GPU 'h10'" in message and "did you mean" in message
    assert "h100-sxm" in message
    assert "\n" not in message

    with pytest.raises(UsageError, match="rtx-4090"):
        get_gpu("rtx 4080")


def test_unknown_name_without_close_match_lists_known_gpus():
    with pytest.raises(UsageError) as info:
        get_gpu("zzzz")
    assert "h100-sxm" in str(info.value) and "\n" not in str(info.value)


def _user_profile(**overrides) -> dict:
    data = {
        "id": "my-gpu",
        "name": "My Lab GPU",
        "vendor": "nvidia",
        "architecture": "Ada",
        "compute_capability": 8.9,
        "aliases": ["lab-gpu"],
        "memory_marketing_bytes": 48 * 2**30,
        "memory_total_bytes": 47_000_000_000,
        "memory_bandwidth_bytes_per_s": 960_000_000_000,
        "memory_type": "GDDR6",
        "flops": {"fp32": 9.1e13, "bf16": 1.8e14, "fp16": 1.8e14, "fp8": 3.6e14},
        "native_bf16": True,
        "native_fp8": True,
        "achievable_bandwidth_fraction": 0.85,
        "sources": {"memory_total_bytes": "observed: torch.cuda.mem_get_info on our box"},
    }
    data.update(overrides)
    return data


def test_user_yaml_file_loads_by_function_and_by_get_gpu(tmp_path):
    path = tmp_path / "my-gpu.yaml"
    path.write_text(yaml.safe_dump(_user_profile()))
    gpu = load_gpu_file(path)
    assert isinstance(gpu, GpuProfile)
    assert gpu.id == "my-gpu" and gpu.aliases == ("lab-gpu",)
    assert gpu.memory_total_bytes == 47_000_000_000
    assert get_gpu(str(path)) == gpu
    assert get_gpu(path) == gpu


def test_user_yaml_id_defaults_to_file_stem(tmp_path):
    data = _user_profile()
    del data["id"]
    path = tmp_path / "Lab_Box.yml"
    path.write_text(yaml.safe_dump(data))
    assert load_gpu_file(path).id == "lab-box"


def test_user_yaml_accepts_exponent_numbers_without_sign(tmp_path):
    # YAML 1.1 (PyYAML) reads 960e9 as a string; users write it anyway
    text = yaml.safe_dump(_user_profile()).replace("960000000000", "960e9").replace("47000000000", "47e9")
    path = tmp_path / "exp.yaml"
    assert "960e9" in text and "47e9" in text
    path.write_text(text)
    gpu = load_gpu_file(path)
    assert gpu.memory_bandwidth_bytes_per_s == 960_000_000_000
    assert gpu.memory_total_bytes == 47_000_000_000


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({"memory_total_bytes": -5}, "memory_total_bytes"),
        ({"memory_marketing_bytes": 0}, "memory_marketing_bytes"),
        ({"memory_total_bytes": 60 * 2**30}, "more than 10%"),
        ({"memory_bandwidth_bytes_per_s": 0}, "memory_bandwidth_bytes_per_s"),
        ({"compute_capability": 8.6}, "native_fp8"),
        ({"native_fp8": False}, "native_fp8"),
        ({"compute_capability": None}, "compute_capability"),
        ({"flops": {"fp17": 1e12}}, "fp17"),
        ({"achievable_bandwidth_fraction": 1.5}, "achievable_bandwidth_fraction"),
        ({"vendor": "intel"}, "vendor"),
        ({"unexpected_field": 1}, "unexpected_field"),
        ({"id": "Bad Id"}, "id"),
    ],
)
def test_malformed_user_yaml_gives_a_clear_usage_error(tmp_path, overrides, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_user_profile(**overrides)))
    with pytest.raises(UsageError) as info:
        load_gpu_file(path)
    message = str(info.value)
    assert message.startswith(f"invalid GPU profile {path}")
    assert expected in message
    assert "\n" not in message


def test_unreadable_or_non_mapping_yaml(tmp_path):
    with pytest.raises(UsageError, match="not found"):
        get_gpu(str(tmp_path / "missing.yaml"))
    broken = tmp_path / "broken.yaml"
    broken.write_text("id: [unclosed\n")
    with pytest.raises(UsageError, match="not valid YAML"):
        load_gpu_file(broken)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(UsageError, match="mapping"):
        load_gpu_file(listy)


def test_profiles_are_immutable():
    with pytest.raises(Exception):
        get_gpu("t4").memory_total_bytes = 1  # type: ignore[misc]


def test_every_shipped_file_passes_the_schema_and_matches_the_fast_loader():
    """`kvcalc plan` loads shipped profiles without pydantic; this is where they are held to every rule."""
    from importlib import resources

    from kvcalc.hardware.registry import _read_yaml
    from kvcalc.hardware.schema import validate_profile

    folder = resources.files("kvcalc") / "hardware_profiles"
    by_id = {g.id: g for g in list_gpus()}
    files = [e for e in folder.iterdir() if e.name.endswith(".yaml")]
    assert len(files) == len(by_id) >= 13
    for entry in files:
        checked = validate_profile(_read_yaml(entry.read_text(), entry.name), entry.name)
        assert checked == by_id[checked.id]


def _kvcalc_imports(module_file: Path) -> set[str]:
    """The kvcalc modules a file imports (relative imports resolved), at any depth of the file."""
    import ast

    tree = ast.parse(module_file.read_text())
    package = "kvcalc." + ".".join(module_file.relative_to(Path(__file__).parents[1] / "kvcalc").with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rstrip(".").split(".")
                base = base[: len(base) - (node.level - 1)]
                found.add(".".join(base + ([node.module] if node.module else [])))
            elif node.module and node.module.startswith("kvcalc"):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("kvcalc"))
    return found


def test_hardware_package_imports_one_way():
    """profile is the leaf; schema imports only profile; registry imports profile (and the schema lazily)."""
    folder = Path(__file__).parents[1] / "kvcalc" / "hardware"
    assert _kvcalc_imports(folder / "profile.py") == {"kvcalc.units"}
    assert _kvcalc_imports(folder / "schema.py") == {"kvcalc.errors", "kvcalc.schema_errors", "kvcalc.units",
                                                     "kvcalc.hardware.profile"}
    assert "kvcalc.hardware.registry" not in _kvcalc_imports(folder / "schema.py")


def test_plan_on_a_shipped_gpu_never_imports_the_schema():
    import subprocess
    import sys

    code = ("import sys\nfrom kvcalc.cli import main\n"
            "try:\n    main(['plan', '--gpu', 'h200', '--context', '8k', '--json'])\nexcept SystemExit:\n    pass\n"
            "print('kvcalc.hardware.schema' in sys.modules, 'pydantic' in sys.modules, file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=Path(__file__).parents[1])
    assert result.stderr.split()[-2:] == ["False", "False"]
