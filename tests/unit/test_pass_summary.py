"""The VitisAI pass summary, read (ryzenai_core.embeddings.pass_summary) on AMD's published and constructed samples.

The samples and where each comes from: tests/fixtures/vitisai/README.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ryzenai_core.embeddings.pass_summary import (
    FINAL_SUMMARY,
    PRELIMINARY_SUMMARY,
    parse_pass_summary,
    read_pass_summary,
)

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "vitisai"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text(encoding="utf-8")


def test_amds_resnet18_bf16_summary_reads_as_everything_on_the_npu() -> None:
    s = parse_pass_summary(sample("resnet18_bf16-ve2.final-vaiml-pass-summary.txt"))
    assert (s.operators, s.supported, s.offloaded) == (49, 49, 49)
    assert (s.gops, s.gops_supported, s.gops_offloaded) == (3.64388, 3.644, 3.644)
    assert (s.subgraphs_supported, s.subgraphs_offloaded) == (1, 1)
    assert (s.partitions_npu, s.partitions_cpu) == (1, 0)
    assert s.fallbacks == {}
    assert (s.model_dtype, s.device_dtype) == ("float32", "bfloat16")
    assert s.device == "ve2 (part number: xc2ve3858)"  # "Target Device" in the newer layout
    assert s.compile_seconds == 281.0
    assert (s.npu_share, s.cpu_operators, s.verdict) == (1.0, 0, "npu")
    assert s.line() == "49 of 49 operators (100%) on the NPU, 0 on the CPU; 100% of the work"


def test_amds_yolov8m_summary_in_the_older_layout_leaves_one_operator_on_the_cpu() -> None:
    s = parse_pass_summary(sample("yolov8m_vint8-ve2.final-vaiml-pass-summary.txt"))
    assert (s.operators, s.offloaded, s.cpu_operators) == (1182, 1181, 1)
    assert s.npu_share == pytest.approx(1181 / 1182)
    assert s.npu_gops_share == pytest.approx(84.215 / 84.2197)
    assert s.device == "ve2"
    assert s.device_dtype == "bfloat16 and int8"
    assert s.compile_seconds is None and s.partitions_cpu is None
    assert s.verdict == "partial"
    # 99.915% is not shown as 100%, nor is 99.994% of the work.
    assert s.line() == "1181 of 1182 operators (99.92%) on the NPU, 1 on the CPU; 99.99% of the work"


def test_a_model_whose_subgraphs_failed_to_compile_ran_on_the_cpu() -> None:
    s = parse_pass_summary(sample("constructed-stx-compile-errors.final-vaiml-pass-summary.txt"))
    assert (s.operators, s.supported, s.offloaded) == (1209, 1157, 0)
    assert s.verdict == "cpu"
    assert s.npu_share == 0.0
    assert s.fallbacks == {"with compilation errors (fall back to CPU)": 11}
    assert s.line().startswith(
        "VitisAI requested, ran on the CPU: 0 of 1209 operators (0.00%) on the NPU, 1209 on the CPU"
    )
    assert s.line().endswith("subgraphs 11 with compilation errors (fall back to CPU)")


def test_the_offloaded_count_not_the_supported_one_says_where_it_ran() -> None:
    s = parse_pass_summary(sample("constructed-stx-partial.final-vaiml-pass-summary.txt"))
    assert (s.supported, s.offloaded, s.npu_operators, s.cpu_operators) == (251, 248, 248, 6)
    assert s.fallbacks == {"below 20% GOPs threshold (fall back to CPU)": 1}
    assert s.verdict == "partial"
    assert s.describe()["npu_share"] == pytest.approx(248 / 254)


def test_a_preliminary_summary_without_a_space_before_the_percentage() -> None:
    s = parse_pass_summary(
        sample("constructed-stx-nothing-supported.preliminary-vaiml-pass-summary.txt"), kind="preliminary"
    )
    assert (s.operators, s.supported, s.offloaded) == (251, 0, None)
    assert s.gops_supported == 0.0
    assert s.npu_operators == 0
    assert s.verdict == "cpu"
    assert "(compile not finished)" not in s.line()  # nothing supported: no compile can change that
    assert "VitisAI requested, ran on the CPU" in s.line()


def test_a_preliminary_summary_counts_supported_operators_until_the_compile_ends() -> None:
    text = "Number of operators in the model: 10\nNumber of operators supported by VAIML: 8 (80.000%)\n"
    s = parse_pass_summary(text, kind="preliminary")
    assert (s.npu_operators, s.cpu_operators, s.verdict) == (8, 2, "partial")
    assert s.line() == "8 of 10 operators (80.00%) supported on the NPU (compile not finished), 2 on the CPU"


def test_older_fallback_lines_and_thousands_separators_are_read() -> None:
    # The layout a third-party parser of earlier releases matches: "compilation issue", "GOPs% (2%)".
    text = (
        "Number of operators in the model: 1,024\n"
        "Number of operators supported by VAIML: 1,000 (97.656%)\n"
        "Number of operators offloaded by VAIML: 900 (87.891%)\n"
        "Number of subgraphs with compilation issue: 1\n"
        "Number of subgraphs below GOPs% (2%) threshold: 2\n"
    )
    s = parse_pass_summary(text)
    assert (s.operators, s.offloaded) == (1024, 900)
    assert s.fallbacks == {"with compilation issue": 1, "below GOPs% (2%) threshold": 2}


@pytest.mark.parametrize(
    "text", ["", "not a summary\n", "GOPs of the model: 1.0\n"], ids=["empty", "other", "no count"]
)
def test_text_without_operator_counts_is_unrecognised_not_an_error(text: str) -> None:
    s = parse_pass_summary(text, path=Path("x.txt"))
    assert not s.recognised
    assert s.verdict == "unknown"
    assert s.npu_share is None
    assert s.line() == "unrecognised VitisAI pass summary (x.txt)"


def test_read_prefers_the_final_summary(tmp_path: Path) -> None:
    folder = tmp_path / "key"
    folder.mkdir()
    (folder / PRELIMINARY_SUMMARY).write_text(
        sample("constructed-stx-nothing-supported.preliminary-vaiml-pass-summary.txt")
    )
    got = read_pass_summary(tmp_path, "key")
    assert got is not None and got.kind == "preliminary" and got.path == folder / PRELIMINARY_SUMMARY
    (folder / FINAL_SUMMARY).write_text(sample("resnet18_bf16-ve2.final-vaiml-pass-summary.txt"))
    got = read_pass_summary(tmp_path, "key")
    assert got is not None and got.kind == "final" and got.verdict == "npu"


def test_read_without_a_summary_is_none(tmp_path: Path) -> None:
    assert read_pass_summary(tmp_path, "never-compiled") is None
    (tmp_path / "empty").mkdir()
    assert read_pass_summary(tmp_path, "empty") is None
