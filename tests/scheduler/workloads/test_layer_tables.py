"""The per-layer tables of the data-parallel models (scheduler/data/layers.yaml):
well formed, and their totals agree with models.yaml and with published figures."""

from __future__ import annotations

from importlib import resources
from typing import Any

import pytest

from scheduler.workloads.profiles import load_models
from topologies.datafile import parse_data

# Forward GFLOPs per sample (2 x multiply-adds) of each model at its table's input.
# torchvision's model table (pytorch.org/vision/stable/models.html, column "GFLOPS",
# which counts multiply-adds at 224x224) gives the CNNs: VGG11 7.61, VGG16 15.47,
# VGG19 19.63 (He et al. 2016, section 3.3, also gives VGG-19 19.6 billion
# multiply-adds), ResNet50 4.09 (v1.5; He et al. 2016 Table 1 gives 3.8 for v1),
# wide_resnet101_2 22.75.
# Jiao et al. 2020 (TinyBERT), Table 1: BERT-base at seq 128 is 22.5 GFLOPs, the
# encoder all four 12 x 768 encoder models share; their MLM head adds the
# de-embedding, 2 x d_model x n_vocab per predicted token (Kaplan et al. 2020,
# Table 1), at the table's 20 masked positions.
# GPT-1: Kaplan et al. 2020, Table 1, per token 2N + 2 n_layer n_ctx d_model plus
# the de-embedding 2 d_model n_vocab, N = 12 n_layer d_model^2 (non-embedding
# params), at n_ctx = 512 tokens per sample.
MASKED = 20
D_MODEL = 768


def _mlm(vocab: int) -> float:
    return 22.5 + MASKED * 2 * D_MODEL * vocab / 1e9


def _gpt1() -> float:
    layers, ctx, vocab = 12, 512, 40478
    per_token = 2 * 12 * layers * D_MODEL**2 + 2 * layers * ctx * D_MODEL + 2 * D_MODEL * vocab
    return ctx * per_token / 1e9


PUBLISHED_GFLOPS = {
    "vgg11": 2 * 7.61,
    "vgg16": 2 * 15.47,
    "vgg19": 2 * 19.63,
    "resnet50": 2 * 4.09,
    "wideresnet101": 2 * 22.75,
    "bert": _mlm(30522),
    "roberta": _mlm(50265),
    "xlm": _mlm(250002),
    "camembert": _mlm(32005),
    "gpt1": _gpt1(),
}

# models.yaml's params_m where it is off the architecture: none now (XLM-R base was
# 270M, Conneau et al. 2020's rounding; its architecture is 278.3M: a 250002 x 768
# embedding of 192.0M, 12 BERT-base layers of 85.1M and a head of 0.8M).
ARCHITECTURE_PARAMS_M: dict[str, float] = {}

# Rows allowed above 6.25M params (25 MB fp32): each holds one tensor that large.
SINGLE_TENSOR_ROWS = {
    "vgg11": {"classifier.0", "classifier.3"},
    "vgg16": {"classifier.0", "classifier.3"},
    "vgg19": {"classifier.0", "classifier.3"},
    "resnet50": set(),
    "wideresnet101": {"layer4.0.conv2", "layer4.1.conv2", "layer4.2.conv2"},
    "bert": {"embeddings.word_embeddings"},
    "roberta": {"embeddings.word_embeddings"},
    "xlm": {"embeddings.word_embeddings"},
    "camembert": {"embeddings.word_embeddings"},
    "gpt1": {"tokens_embed"},
}


@pytest.fixture(scope="module")
def tables() -> dict[str, Any]:
    """The tables, parsed once for the module (the file is some 800 lines)."""
    text = resources.files("scheduler").joinpath("data/layers.yaml").read_text()
    doc = parse_data(text, "yaml", "layers.yaml")
    assert isinstance(doc, dict) and isinstance(doc["models"], dict)
    return doc["models"]


def _rows(tables: dict[str, Any], model: str) -> dict[str, tuple[float, float]]:
    return {name: (params, gflops) for name, params, gflops in tables[model]["layers"]}


def test_the_data_parallel_models_of_models_yaml_each_have_a_table(tables: dict[str, Any]) -> None:
    data_parallel = {k for k, m in load_models().items() if m.parallelism == "data"}
    assert set(tables) == data_parallel == set(PUBLISHED_GFLOPS)


@pytest.mark.parametrize("model", sorted(PUBLISHED_GFLOPS))
def test_rows_are_name_params_gflops_with_unique_names(tables: dict[str, Any], model: str) -> None:
    table = tables[model]
    assert isinstance(table["source"], str) and table["source"]
    assert isinstance(table["input"], str) and table["input"]
    rows = table["layers"]
    assert rows, model
    for row in rows:
        assert isinstance(row, list) and len(row) == 3, row
        name, params, gflops = row
        assert isinstance(name, str) and name, row
        for value in (params, gflops):
            assert isinstance(value, int | float) and not isinstance(value, bool), row
            assert value >= 0, row
    names = [row[0] for row in rows]
    assert len(names) == len(set(names)), model


@pytest.mark.parametrize("model", sorted(PUBLISHED_GFLOPS))
def test_params_total_matches_models_yaml(tables: dict[str, Any], model: str) -> None:
    total = sum(params for params, _ in _rows(tables, model).values())
    expected = ARCHITECTURE_PARAMS_M.get(model, load_models()[model].params_m)
    assert total == pytest.approx(expected, rel=0.03)


@pytest.mark.parametrize("model", sorted(PUBLISHED_GFLOPS))
def test_forward_gflops_total_matches_the_published_figure(
    tables: dict[str, Any], model: str
) -> None:
    total = sum(gflops for _, gflops in _rows(tables, model).values())
    assert total == pytest.approx(PUBLISHED_GFLOPS[model], rel=0.10)


@pytest.mark.parametrize("model", sorted(PUBLISHED_GFLOPS))
def test_no_row_above_25_mb_fp32_but_a_single_tensor(tables: dict[str, Any], model: str) -> None:
    large = {name for name, (params, _) in _rows(tables, model).items() if params > 6.25}
    assert large == SINGLE_TENSOR_ROWS[model]


# One row per family, by hand from the architecture: (params in M, GFLOPs).
HAND_CHECKED = [
    # conv 3x3, 3 -> 64, 224x224 out: 3*3*3*64 + 64 params, 2*224*224*27*64 FLOPs.
    ("vgg19", "features.0", 3 * 3 * 3 * 64 + 64, 2 * 224 * 224 * 27 * 64),
    # fc6: 7*7*512 -> 4096, one sample.
    ("vgg16", "classifier.0", 25088 * 4096 + 4096, 2 * 25088 * 4096),
    # conv 7x7 stride 2, 3 -> 64, no bias, batch norm folded (2 x 64), 112x112 out.
    ("resnet50", "conv1", 7 * 7 * 3 * 64 + 2 * 64, 2 * 112 * 112 * 147 * 64),
    # layer4's 3x3 conv, 1024 -> 1024 (twice ResNet's 512), 7x7 out, batch norm folded.
    ("wideresnet101", "layer4.1.conv2", 9 * 1024 * 1024 + 2 * 1024, 2 * 7 * 7 * 9 * 1024 * 1024),
    # FFN up-projection, 768 -> 3072 over 128 tokens.
    ("bert", "encoder.layer.0.intermediate.dense", 768 * 3072 + 3072, 2 * 128 * 768 * 3072),
    # attention scores and context: 2 * 2 * seq^2 * hidden, no params.
    ("roberta", "encoder.layer.11.attention.scores", 0, 4 * 128**2 * 768),
    # the embedding table, one tensor; the tied MLM decoder (bias only) at 20 positions.
    ("xlm", "embeddings.word_embeddings", 250002 * 768, 0),
    ("camembert", "lm_head.decoder", 32005, 2 * 20 * 768 * 32005),
    # fused QKV, 768 -> 2304 over 512 tokens; the tied LM head over all 512.
    ("gpt1", "h.0.attn.c_attn", 768 * 2304 + 2304, 2 * 512 * 768 * 2304),
    ("gpt1", "lm_head", 0, 2 * 512 * 768 * 40478),
]


@pytest.mark.parametrize(("model", "row", "params", "flops"), HAND_CHECKED)
def test_hand_checked_row(
    tables: dict[str, Any], model: str, row: str, params: int, flops: int
) -> None:
    got_params, got_gflops = _rows(tables, model)[row]
    assert got_params == pytest.approx(params / 1e6, abs=1e-6)
    assert got_gflops == pytest.approx(flops / 1e9, abs=1e-6)


def test_rows_run_in_forward_order(tables: dict[str, Any]) -> None:
    """DDP buckets take parameters in reverse of this order: the first rows are the
    input end, the last the output end."""
    for model in ("vgg11", "vgg16", "vgg19"):
        names = list(_rows(tables, model))
        assert (names[0], names[-1]) == ("features.0", "classifier.6")
    assert list(_rows(tables, "resnet50"))[:2] == ["conv1", "layer1.0.conv1"]
    assert list(_rows(tables, "resnet50"))[-1] == "fc"
    assert list(_rows(tables, "bert"))[0] == "embeddings.word_embeddings"
    assert list(_rows(tables, "gpt1"))[-1] == "lm_head"
