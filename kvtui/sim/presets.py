"""The one preset table: the demo host's hardware and deployments — the GPU, the simulated models
(sizes, layers, KV cell, load times), the presets (the unit each demo deployment starts with) — and
how ``demo_model`` / ``demo_engine`` resolve to a preset.

Pure (no I/O, no imports beyond the standard library): ``kvtui.config`` checks ``demo_model`` /
``demo_engine`` with ``resolve_preset_name`` at configuration time, and the demo host
(``kvtui.sim.backend``) resolves its preset with the same function, so a hosts file that loads is a
demo host that starts. The names (``PRESET_ENGINES``, ``PRESET_NODES``) are read off ``PRESETS``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEMO_ENGINES: tuple[str, ...] = ("sglang", "vllm")
DEMO_GPU_COUNT = 8  # the simulated host's GPUs: 0 … 7

GIB = 1 << 30


MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """The simulated card (all GPUs of a demo host are alike)."""

    name: str = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    total_mib: int = 97887
    count: int = DEMO_GPU_COUNT
    idle_mib: int = 1
    idle_w: float = 34.0
    max_w: float = 600.0

    @property
    def total_gib(self) -> float:
        return self.total_mib / 1024.0


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What the simulation needs to know about a model (per the engine's own formulas)."""

    path: str
    arch: str  # the class name SGLang prints in `Load weight end … type=`
    layers: int
    attention: str  # "mla" | "gqa"
    max_context: int
    weights_gib: float  # all ranks together (divided by TP)
    shards: int
    load_seconds: float  # simulated seconds for the whole checkpoint
    kv_heads: int = 0
    head_dim: int = 0
    v_head_dim: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    dtype: str = "bfloat16"
    quant: str | None = None
    replicated_gib: float = 0.0  # per rank, not divided by TP (embeddings of a draft, …)
    # CUDA-graph memory: the first (largest) graph allocates the shared pool (per captured bs of
    # the largest batch), every graph adds a fixed part and a part per batch row.
    graph_pool_per_bs_gib: float = 0.008
    graph_per_graph_gib: float = 0.04
    graph_per_bs_gib: float = 0.0025
    capture_seconds_per_graph: float = 2.2
    # The first real forward (SGLang's warm-up request) allocates what the graphs do not hold:
    # attention/MoE workspaces and the NCCL / custom-all-reduce buffers. A boot whose capture left
    # less than this free dies at the warm-up with a CUDA OOM — the reason the calculator keeps a
    # graph margin (1 GiB by default) above the settled capture need.
    first_forward_gib: float = 0.5
    decode_tok_s: float = 40.0  # per request at low batch
    # vLLM's memory profile: activation peak at 8192 batched tokens, and CUDA graphs (per rank)
    vllm_peak_gib: float = 2.2
    vllm_graph_gib: float = 0.9

    def hf_config(self) -> dict[str, object]:
        """The model's ``config.json`` as its checkpoint directory would hold it (the keys that
        say its KV geometry and context: what a reader of the host's files finds)."""
        cfg: dict[str, object] = {
            "architectures": [self.arch],
            "num_hidden_layers": self.layers,
            "max_position_embeddings": self.max_context,
            "torch_dtype": self.dtype,
        }
        if self.attention == "mla":
            cfg.update(kv_lora_rank=self.kv_lora_rank, qk_rope_head_dim=self.qk_rope_head_dim)
        else:
            cfg.update(num_attention_heads=self.kv_heads * 8, num_key_value_heads=self.kv_heads,
                       head_dim=self.head_dim)
        if self.quant:
            cfg["quantization_config"] = {"quant_method": self.quant}
        return cfg

    def cell_bytes(self, tp: int, kv_bytes: int) -> int:
        """Bytes per token per rank (engines.md §2.3)."""
        if self.attention == "mla":
            return (self.kv_lora_rank + self.qk_rope_head_dim) * self.layers * kv_bytes
        heads = max(1, self.kv_heads // tp)
        return heads * (self.head_dim + self.v_head_dim) * self.layers * kv_bytes


KIMI_K26 = ModelSpec(
    path="/models/Kimi-K2.6",
    arch="DeepseekV3ForCausalLM",
    layers=61,
    attention="mla",
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    max_context=262144,
    weights_gib=543.17924,  # seed 0: a 192,406-token pool at 0.85 (under a 200,000 context)
    shards=64,
    load_seconds=236.0,
    quant="compressed-tensors",
    graph_pool_per_bs_gib=0.0085,
    graph_per_graph_gib=0.04,
    graph_per_bs_gib=0.0025,
    capture_seconds_per_graph=3.1,
    decode_tok_s=38.0,
)


LLAMA_70B = ModelSpec(
    path="/models/Llama-3.1-70B-Instruct",
    arch="LlamaForCausalLM",
    layers=80,
    attention="gqa",
    kv_heads=8,
    head_dim=128,
    v_head_dim=128,
    max_context=131072,
    weights_gib=131.42,
    shards=30,
    load_seconds=150.0,
    graph_pool_per_bs_gib=0.0012,
    graph_per_graph_gib=0.012,
    graph_per_bs_gib=0.0002,
    capture_seconds_per_graph=0.9,
    decode_tok_s=32.0,
)


QWEN3_32B = ModelSpec(
    path="/models/Qwen3-32B",
    arch="Qwen3ForCausalLM",
    layers=64,
    attention="gqa",
    kv_heads=8,
    head_dim=128,
    v_head_dim=128,
    max_context=40960,
    weights_gib=61.03,
    shards=17,
    load_seconds=70.0,
    graph_pool_per_bs_gib=0.004,
    graph_per_graph_gib=0.02,
    graph_per_bs_gib=0.0009,
    capture_seconds_per_graph=1.1,
    decode_tok_s=55.0,
)


QWEN3_32B_EAGLE3 = ModelSpec(
    path="/models/Qwen3-32B-EAGLE3",
    arch="LlamaForCausalLMEagle3",
    layers=1,
    attention="gqa",
    kv_heads=8,
    head_dim=128,
    v_head_dim=128,
    max_context=40960,
    weights_gib=0.78,
    replicated_gib=0.31,
    shards=1,
    load_seconds=3.0,
    graph_pool_per_bs_gib=0.0015,
    graph_per_graph_gib=0.01,
    graph_per_bs_gib=0.0002,
    capture_seconds_per_graph=0.5,
)


DEEPSEEK_R1 = ModelSpec(
    path="/models/DeepSeek-R1",
    arch="DeepseekV3ForCausalLM",
    layers=61,
    attention="mla",
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    max_context=163840,
    weights_gib=642.0,  # FP8: about 40 GiB per rank at TP16
    shards=163,
    load_seconds=300.0,
    quant="fp8",
    graph_pool_per_bs_gib=0.0085,
    graph_per_graph_gib=0.04,
    graph_per_bs_gib=0.0025,
    capture_seconds_per_graph=3.0,
    decode_tok_s=36.0,
)


MODELS: dict[str, ModelSpec] = {
    m.path: m for m in (KIMI_K26, LLAMA_70B, QWEN3_32B, QWEN3_32B_EAGLE3, DEEPSEEK_R1)
}


@dataclass(frozen=True, slots=True)
class Preset:
    """A demo deployment: the unit the demo host starts with."""

    key: str
    description: str  # the unit's Description=
    unit_name: str
    model: ModelSpec
    flags: tuple[str, ...]  # one flag (with its value) per ExecStart continuation line
    gpus: tuple[int, ...]  # CUDA_VISIBLE_DEVICES
    version: str = "0.5.14"  # which SGLang 0.5.x format strings to print
    engine: str = "sglang"
    exe: str = "/opt/sglang/venv/bin/python"
    module: str = "sglang.launch_server"
    workdir: str = "/opt/sglang"
    restart_sec: int = 10
    launch: str = ""  # the command before the flags (default: "EXE -m MODULE")
    environment: tuple[str, ...] = ("SGLANG_LOG_MS=1",)
    nnodes: int = 1  # hosts the deployment spans (each host's unit says its own --node-rank)

    def unit_text(self, gpus: Sequence[int] | None = None, node: int = 0) -> str:
        """The unit of one host (``node``: its rank in a multi-node preset: ``--node-rank NODE``)."""
        # the configured GPUs become CUDA_VISIBLE_DEVICES when there are as many as the preset uses
        use = gpus if gpus and len(gpus) == len(self.gpus) else self.gpus
        visible = ",".join(str(g) for g in use)
        flags = [f"--node-rank {node}" if f.startswith("--node-rank ") else f for f in self.flags]
        cont = " \\\n    ".join([self.launch or f"{self.exe} -m {self.module}", *flags])
        return (
            "[Unit]\n"
            f"Description={self.description}\n"
            "After=network-online.target\n"
            "Wants=network-online.target\n"
            "\n"
            "[Service]\n"
            "Type=simple\n"
            "User=root\n"
            f"WorkingDirectory={self.workdir}\n"
            f"Environment=CUDA_VISIBLE_DEVICES={visible}\n"
            + "".join(f"Environment={e}\n" for e in self.environment)
            + f"ExecStart={cont}\n"
            "Restart=on-failure\n"
            f"RestartSec={self.restart_sec}\n"
            "TimeoutStartSec=900\n"
            "\n"
            "[Install]\n"
            "WantedBy=multi-user.target\n"
        )


PRESETS: dict[str, Preset] = {
    p.key: p
    for p in (
        Preset(
            key="kimi-k2.6",
            description="SGLang server (Kimi K2.6, TP8)",
            unit_name="sglang-k26.service",
            model=KIMI_K26,
            flags=(
                "--model-path /models/Kimi-K2.6",
                "--served-model-name kimi-k2.6",
                "--tp 8",
                "--trust-remote-code",
                "--context-length 200000",
                "--mem-fraction-static 0.85",
                "--max-running-requests 64",
                "--cuda-graph-max-bs 64",
                "--host 0.0.0.0 --port 30000",
            ),
            gpus=(0, 1, 2, 3, 4, 5, 6, 7),
        ),
        Preset(
            key="llama-70b",
            description="SGLang server (Llama 3.1 70B, TP4)",
            unit_name="sglang-llama70b.service",
            model=LLAMA_70B,
            flags=(
                "--model-path /models/Llama-3.1-70B-Instruct",
                "--tp 4",
                "--mem-fraction-static 0.88",
                "--context-length 131072",
                "--host 0.0.0.0 --port 30000",
            ),
            gpus=(0, 1, 2, 3),
            version="0.5.10",
        ),
        Preset(
            key="qwen3-32b-eagle3",
            description="SGLang server (Qwen3 32B + EAGLE3 draft, TP2)",
            unit_name="sglang-qwen3-eagle.service",
            model=QWEN3_32B,
            flags=(
                "--model-path /models/Qwen3-32B",
                "--tp 2",
                "--speculative-algorithm EAGLE3",
                "--speculative-draft-model-path /models/Qwen3-32B-EAGLE3",
                "--speculative-num-steps 3",
                "--speculative-eagle-topk 1",
                "--speculative-num-draft-tokens 4",
                "--mem-fraction-static 0.85",
                "--max-running-requests 128",
                "--cuda-graph-max-bs 64",
                "--host 0.0.0.0 --port 30000",
            ),
            gpus=(0, 1),
        ),
        Preset(
            key="vllm-llama-70b",
            description="vLLM server (Llama 3.1 70B, TP4)",
            unit_name="vllm-llama70b.service",
            model=LLAMA_70B,
            engine="vllm",
            exe="/opt/vllm/venv/bin/vllm",
            module="",
            launch="/opt/vllm/venv/bin/vllm serve /models/Llama-3.1-70B-Instruct",
            workdir="/opt/vllm",
            environment=(),
            flags=(
                "--tensor-parallel-size 4",
                "--gpu-memory-utilization 0.90",
                "--max-model-len 131072",
                "--host 0.0.0.0 --port 8000",
            ),
            gpus=(0, 1, 2, 3),
            version="0.11.0",
        ),
        Preset(
            key="deepseek-r1-2node",
            description="SGLang server (DeepSeek-R1 FP8, TP16 over 2 nodes)",
            unit_name="sglang-r1.service",
            model=DEEPSEEK_R1,
            flags=(
                "--model-path /models/DeepSeek-R1",
                "--tp 16",
                "--nnodes 2",
                "--node-rank 0",
                "--dist-init-addr 10.0.0.1:5000",
                "--trust-remote-code",
                "--mem-fraction-static 0.88",
                "--cuda-graph-max-bs 64",
                "--host 0.0.0.0 --port 30000",
            ),
            gpus=(0, 1, 2, 3, 4, 5, 6, 7),
            version="0.5.10",
            nnodes=2,
        ),
    )
}

# preset key -> the engine it simulates, in the order presets are listed to users
PRESET_ENGINES: Mapping[str, str] = {k: p.engine for k, p in PRESETS.items()}
# presets that span several simulated hosts (``[deployments.NAME]`` of demo hosts, one per node:
# ``demo_node`` says which node a host is, ``demo_stall_node`` which node never reaches distributed init)
PRESET_NODES: Mapping[str, int] = {k: p.nnodes for k, p in PRESETS.items() if p.nnodes > 1}
DEFAULT_PRESET = "kimi-k2.6"
DEFAULT_PRESETS: Mapping[str, str] = {"sglang": "kimi-k2.6", "vllm": "vllm-llama-70b"}


class PresetError(ValueError):
    """``demo_model`` / ``demo_engine`` name no simulated deployment. ``str()`` is the whole
    message; ``problem`` what is wrong and ``expected`` what would do, for a caller that words
    it its own way (the hosts-file checker)."""

    def __init__(self, problem: str, expected: str) -> None:
        super().__init__(f"{problem}; {expected}")
        self.problem = problem
        self.expected = expected


def preset_list(engine: str | None = None) -> str:
    """``kimi-k2.6 (sglang), llama-70b (sglang), …`` — the presets (of one engine, when given)."""
    return ", ".join(f"{k} ({e})" for k, e in PRESET_ENGINES.items() if engine is None or e == engine)


def resolve_preset_name(name: str | None, engine: str = "sglang") -> str:
    """The preset key ``demo_model`` names for a ``demo_engine``: a key (case-insensitive) or a
    unique prefix of one; without a name, the engine's default preset. Raises ``PresetError``
    for an unknown engine, an unknown or ambiguous name, or a preset of the other engine."""
    if engine not in DEMO_ENGINES:
        raise PresetError(f"demo_engine '{engine}' is not simulated", f"expected one of: {', '.join(DEMO_ENGINES)}")
    if name is None or not name.strip():
        return DEFAULT_PRESETS.get(engine, DEFAULT_PRESET)
    key = name.strip().lower()
    if key not in PRESET_ENGINES:
        matches = [k for k in PRESET_ENGINES if k.startswith(key)]
        if len(matches) != 1:
            why = f"matches {' and '.join(matches)}" if matches else "is not a demo preset"
            raise PresetError(
                f"demo_model '{name}' {why}", f"expected one of (a name or a unique prefix): {preset_list()}"
            )
        key = matches[0]
    if PRESET_ENGINES[key] != engine:
        raise PresetError(
            f"demo_model '{name}' is the {PRESET_ENGINES[key]} preset {key} but demo_engine is '{engine}'",
            f"expected a {engine} preset: {preset_list(engine)}",
        )
    return key
