"""scripts/gpu_v4/make_tokenizer.py: every id round-trips through decode and encode, also the words that begin with
the bos/eos word (Mixtral's bos is token 1: unpadded, "t1" was cut out of "t1234"; run f's prompts hit the prefix
cache 45-66% for that)."""
import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

spec = importlib.util.spec_from_file_location(
    "make_tokenizer", Path(__file__).resolve().parent.parent / "scripts" / "gpu_v4" / "make_tokenizer.py")
make_tokenizer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_tokenizer)


@pytest.mark.parametrize("vocab, bos, eos", [(32000, 1, 2), (128256, 128000, 128001)])
def test_every_word_round_trips(vocab, bos, eos):
    tok = make_tokenizer.word_level(vocab, bos, eos)
    ids = list(range(3, 300)) + list(range(1000, 1300)) + list(range(10000, 10300)) + [vocab - 1]
    assert tok(tok.decode(ids), add_special_tokens=False)["input_ids"] == ids


def test_a_model_type_with_its_own_tokenizer_class_still_round_trips(tmp_path):
    """Qwen2.5-14B's config (model_type qwen2): with the tokenizer beside config.json, AutoTokenizer loaded it as
    Qwen2Tokenizer and every word encoded to nothing (run h's failed requests); in its own folder it round-trips."""
    import json

    from transformers import AutoTokenizer

    cfg = json.loads((Path(__file__).resolve().parent.parent / "kvcalc/catalog/qwen2.5-14b.json").read_text())["config"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    make_tokenizer.write(str(tmp_path), str(tmp_path / "tokenizer"))
    tok = AutoTokenizer.from_pretrained(tmp_path / "tokenizer")
    ids = [3, 151000, 151643, 151645, 152063]
    assert tok(tok.decode(ids), add_special_tokens=False)["input_ids"] == ids
