"""nvidia-smi CSV and NVML parsing (kvtui/gpu.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvtui.gpu import (
    QUERY_APPS_FIELDS,
    QUERY_GPU_FIELDS,
    QUERY_GPU_LEGACY_FIELDS,
    THROTTLE_REASONS,
    GpuProcess,
    GpuSample,
    QueryGpuTicks,
    mark_stale,
    parse_compute_apps_csv,
    parse_compute_apps_line,
    parse_query_gpu_csv,
    parse_query_gpu_line,
    process_from_nvml,
    sample_from_nvml,
    select_gpus,
    throttle_text,
)

GPU_FIX = Path(__file__).parent / "fixtures" / "gpu"


def format_query_gpu_line(sample: GpuSample) -> str:
    """The ``--query-gpu=QUERY_GPU_FIELDS --format=csv,noheader,nounits`` line nvidia-smi would print."""

    def opt(v: float | None, fmt: str) -> str:
        return "[N/A]" if v is None else format(v, fmt)

    names = {n.strip() for n in (sample.throttle or "").split(",")}
    mask = sum(bit for bit, name in THROTTLE_REASONS if name in names)
    return ", ".join([str(sample.index), sample.uuid or "[N/A]", sample.name or "[N/A]", f"{sample.used_mib:.0f}",
                      f"{sample.total_mib:.0f}", opt(sample.util, ".0f"), opt(sample.temperature_c, ".0f"),
                      opt(sample.power_w, ".2f"), opt(sample.power_limit_w, ".2f"), f"0x{mask:016x}"])


def test_field_lists_are_the_nvidia_smi_arguments() -> None:
    assert QUERY_GPU_FIELDS == ("index,uuid,name,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw,"
                                "power.limit,clocks_throttle_reasons.active")
    assert QUERY_GPU_LEGACY_FIELDS == ("index,uuid,name,memory.used,memory.total,utilization.gpu,temperature.gpu,"
                                       "power.draw")
    assert QUERY_APPS_FIELDS == "gpu_uuid,pid,process_name,used_memory"


def test_fixture_8gpu_csv() -> None:
    samples = parse_query_gpu_csv((GPU_FIX / "query-gpu-8.csv").read_text(), ts=123.0)
    assert [s.index for s in samples] == list(range(8))
    first = samples[0]
    assert first.uuid == "GPU-6c1f9a2e-0b7d-4c1e-9d1a-1f2e3d4c5b60"
    assert first.name == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert first.used_mib == 65421
    assert first.total_mib == 97887
    assert first.util == 0
    assert first.temperature_c == 41
    assert first.power_w == pytest.approx(118.52)
    assert first.ts == 123.0
    assert not first.stale
    assert samples[4].temperature_c == 43
    assert samples[5].used_mib == 65402
    assert first.used_gib == pytest.approx(65421 / 1024)


def test_odd_lines_na_units_header_garbage() -> None:
    text = (GPU_FIX / "query-gpu-odd.csv").read_text()
    samples = parse_query_gpu_csv(text, ts=1.0)
    # header, blank, garbage, [N/A] memory, non-numeric index, zero total, NVML error: all dropped
    assert [s.index for s in samples] == [0, 1]
    s0, s1 = samples
    assert (s0.util, s0.temperature_c, s0.power_w) == (None, None, None)
    assert s0.used_mib == 65421
    # stray units (a forgotten "nounits") are tolerated
    assert (s1.used_mib, s1.total_mib, s1.util, s1.power_w) == (1, 81559, 3, pytest.approx(71.2))


@pytest.mark.parametrize(
    "line",
    [
        "",
        "   ",
        "index, uuid, name, memory.used [MiB], memory.total [MiB], utilization.gpu [%], temperature.gpu, power.draw",
        "0, GPU-x, name, 1, 2",
        "0, GPU-x, name, abc, 97887, 0, 40, 100",
        "-1, GPU-x, name, 10, 97887, 0, 40, 100",
        "0, GPU-x, name, nan, 97887, 0, 40, 100",
        "0, GPU-x, name, 10, inf, 0, 40, 100",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
    ],
)
def test_unusable_gpu_lines_give_none(line: str) -> None:
    assert parse_query_gpu_line(line, 0.0) is None


@given(st.text(max_size=200))
def test_gpu_line_parser_never_raises(line: str) -> None:
    result = parse_query_gpu_line(line, 0.0)
    assert result is None or (result.total_mib > 0 and result.used_mib >= 0)
    assert parse_compute_apps_line(line) is None or isinstance(parse_compute_apps_line(line), GpuProcess)


def test_format_round_trips() -> None:
    s = GpuSample(
        index=3,
        used_mib=1234,
        total_mib=97887,
        util=55,
        ts=9.0,
        uuid="GPU-abc",
        name="X Y",
        temperature_c=61,
        power_w=321.5,
    )
    back = parse_query_gpu_line(format_query_gpu_line(s), 9.0)
    assert back == s
    missing = GpuSample(index=0, used_mib=1, total_mib=2)
    back2 = parse_query_gpu_line(format_query_gpu_line(missing), 0.0)
    assert back2 is not None
    assert back2.util is None
    assert back2.uuid is None
    assert back2.power_w is None


def test_power_limit_and_throttle_reasons() -> None:
    # the full line: power limit and the clocks-throttle bitmask (0x4 = SW power cap)
    line = ("2, GPU-abc, NVIDIA H100 80GB HBM3, 70000, 81559, 97, 71, 412.30, 700.00, "
            "0x0000000000000004")
    s = parse_query_gpu_line(line, 1.0)
    assert s is not None
    assert (s.temperature_c, s.power_w, s.power_limit_w, s.throttle) == (71, pytest.approx(412.3), 700, "power cap")
    # idle (0x1) and sync boost (0x10) are normal states: no warning; thermal + power cap both said
    assert parse_query_gpu_line(line.replace("0x0000000000000004", "0x0000000000000011"), 1.0).throttle is None  # type: ignore[union-attr]
    both = parse_query_gpu_line(line.replace("0x0000000000000004", "0x0000000000000024"), 1.0)
    assert both is not None
    assert both.throttle == "power cap, thermal"
    # [N/A] / [Not Supported] for the new fields: None, the rest read
    na = parse_query_gpu_line("0, GPU-x, A100, 10, 81559, 3, [N/A], [N/A], [N/A], [Not Supported]", 1.0)
    assert na is not None
    assert (na.used_mib, na.temperature_c, na.power_w, na.power_limit_w, na.throttle) == (10, None, None, None, None)
    # an older host (or fake) printing the 8 legacy fields is read as before
    old = parse_query_gpu_line("0, GPU-x, A100, 10, 81559, 3, 40, 100.5", 1.0)
    assert old is not None
    assert (old.temperature_c, old.power_w, old.power_limit_w, old.throttle) == (40, 100.5, None, None)
    # stray units on the limit, a comma in the name, the new fields: still read
    odd = parse_query_gpu_line("1, GPU-y, Odd, Name, 10, 81559, 3, 40, 100.5 W, 350.00 W, 0x80", 1.0)
    assert odd is not None
    assert (odd.name, odd.power_limit_w, odd.throttle) == ("Odd, Name", 350.0, "power brake")
    assert throttle_text(0) is None
    assert throttle_text(None) is None
    # what the simulated hosts print reads back the same
    assert parse_query_gpu_line(format_query_gpu_line(s), 1.0) == s


def test_compute_apps() -> None:
    procs = parse_compute_apps_csv((GPU_FIX / "compute-apps.csv").read_text())
    assert [p.pid for p in procs] == [7003, 7004, 41877, 9999]
    assert procs[0].used_mib == 65000
    assert procs[0].name == "/opt/sglang/venv/bin/python"
    assert procs[2].name == "/home/user/old,run/python3"  # a comma inside the process name
    assert procs[3].used_mib == 0.0  # [N/A] memory: PID kept
    assert parse_compute_apps_line("No running processes found") is None


def test_select_and_stale() -> None:
    samples = parse_query_gpu_csv((GPU_FIX / "query-gpu-8.csv").read_text(), ts=0.0)
    picked = select_gpus(reversed(samples), [5, 1, 3])
    assert [s.index for s in picked] == [1, 3, 5]
    assert [s.index for s in select_gpus(samples, None)] == list(range(8))
    assert all(s.stale for s in mark_stale(picked))


def test_ticks_group_a_stream() -> None:
    lines = (GPU_FIX / "query-gpu-8.csv").read_text().splitlines()
    ticks = QueryGpuTicks()
    out = [t for line in lines * 3 if (t := ticks.feed(line, 0.0)) is not None]
    assert len(out) == 2
    assert all(len(t) == 8 for t in out)
    last = ticks.flush()
    assert last is not None
    assert len(last) == 8
    assert ticks.flush() is None
    known = QueryGpuTicks(expected=8)
    out2 = [t for line in lines if (t := known.feed(line, 0.0)) is not None]
    assert len(out2) == 1  # complete as soon as the 8th line arrives


def test_nvml_helpers() -> None:
    p = process_from_nvml(77, 2 * 1024**3, name="python")
    s = sample_from_nvml(
        2, 10 * 1024**3, 97887 * 1024**2, 5.0, util_gpu=12, uuid="GPU-u", power_mw=250500, processes=[p]
    )
    assert s.used_mib == 10240
    assert s.total_mib == 97887
    assert s.power_w == pytest.approx(250.5)
    assert s.processes[0].gpu_index == 2
    assert s.processes[0].gpu_uuid == "GPU-u"
    assert s.processes[0].used_mib == 2048
    assert process_from_nvml(1, None).used_mib == 0.0
    # the enforced power limit (mW) and the clocks event reasons (bitmask)
    t = sample_from_nvml(0, 1.0, 2.0, 5.0, power_mw=690_000, power_limit_mw=700_000, throttle_mask=0x40)
    assert (t.power_limit_w, t.throttle) == (700.0, "HW thermal")
    assert sample_from_nvml(0, 1.0, 2.0, 5.0).power_limit_w is None
