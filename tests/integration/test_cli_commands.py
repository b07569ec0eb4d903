"""The chat and bench commands, driven without a terminal."""

from __future__ import annotations

import io
import json
import sys

import pytest

from conftest import REPLICAS, TINY_QWEN3
from ryzenai_cli.bench import prompt_lengths
from ryzenai_cli.chat import ChatSession
from ryzenai_cli.main import main
from ryzenai_core import Engine


def test_chat_session_keeps_history_and_reports_the_budget():
    s = ChatSession(Engine.get(TINY_QWEN3), system="Be brief.", max_new_tokens=6, temperature=0)
    out = io.StringIO()
    status = s.ask("hello", out)
    assert len(s.history) == 2 and s.history[1].role == "assistant"
    assert out.getvalue().endswith("\n")
    assert "/4096 tokens" in status and "length" in status
    status2 = s.ask("and again", out)
    first = int(status.split()[0].lstrip("["))
    assert int(status2.split()[0].lstrip("[")) > first  # the history grows the prompt
    assert s.command("/reset") == "[history cleared]" and s.history == []
    assert s.command("/system You are terse.") == "[system prompt set]" and s.system == "You are terse."
    assert s.command("hello") is None


def test_chat_ctrl_c_stops_the_answer_and_keeps_the_session():
    s = ChatSession(Engine.get(TINY_QWEN3), max_new_tokens=2000, temperature=0)

    class Interrupting(io.StringIO):
        fired = False

        def write(self, text):
            if self.tell() > 5 and not self.fired:
                self.fired = True
                raise KeyboardInterrupt  # what Ctrl-C does while the answer streams
            return super().write(text)

    status = s.ask("tell me everything", Interrupting())
    assert len(s.history) == 2
    prompt = Engine.get(TINY_QWEN3).count_tokens(s.history[:1])
    assert status.startswith(f"[{prompt} prompt + ") and "/4096 tokens, no buckets, stopped (Ctrl-C)" in status
    new = int(status.split(" + ")[1].split()[0])
    assert new >= 1 and f"= {prompt + new}/4096" in status
    ok = s.ask("short", io.StringIO())
    assert "prompt" in ok


def test_prompt_lengths_are_bucket_edges_and_one_past():
    assert prompt_lengths((128, 256, 512), 400, 16) == [128, 129, 256, 257]
    assert prompt_lengths((), 100, 10) == [32, 64]


@pytest.mark.slow
def test_bench_json_and_chart(capsys, tmp_path):
    png = tmp_path / "ttft.png"
    code = main(
        [
            "bench",
            str(REPLICAS / "Qwen3-4B_rai_1.8.0_npu_4K"),
            "--provider",
            "cpu",
            "--max-prompt",
            "260",
            "--repeats",
            "1",
            "--new-tokens",
            "4",
            "--json",
            "--png",
            str(png),
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["prompt_tokens"] for r in data["rows"]] == [128, 129, 256, 257]
    # the CPU pads nothing: the NPU's buckets are what it would run, not what ran
    assert [r["planned_prefill_bucket"] for r in data["rows"]] == [128, 256, 256, 512]
    assert all(r["prefill_bucket"] is None and r["padding"] == 0 for r in data["rows"])
    assert all(r["ttft_ms"] > 0 for r in data["rows"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_chart_draws_steps_only_for_bucketed_packages():
    from ryzenai_cli.bench import ttft_drawstyle

    plain = [{"prompt_tokens": n, "prefill_bucket": None} for n in (64, 128, 256)]
    bucketed = [{"prompt_tokens": n, "prefill_bucket": b} for n, b in ((128, 128), (129, 256))]
    assert ttft_drawstyle(plain) == "default"
    assert ttft_drawstyle(bucketed) == "steps-post"


@pytest.mark.slow
def test_chat_image_command_attaches_an_image_to_the_next_message(tmp_path):
    from PIL import Image

    from conftest import MODELS

    red, blue = tmp_path / "red.png", tmp_path / "blue.png"
    Image.new("RGB", (32, 24), "red").save(red)
    Image.new("RGB", (32, 24), "blue").save(blue)
    s = ChatSession(Engine.get(MODELS / "tiny-gemma3-vision"), max_new_tokens=6, temperature=0)
    assert s.command(f"/image {red}") == "[image 1 attached: 32x24, 256 prompt tokens; it goes with your next message]"
    assert "not a file" in s.command(f"/image {tmp_path / 'missing.png'}")
    with_image = s.ask("What is this?", io.StringIO())
    assert "(1 image: 256 image tokens)" in with_image
    assert s.images == [] and s.history[0].has_images  # sent once, kept in the history
    s.command("/reset")
    text_only = s.ask("What is this?", io.StringIO())
    assert int(with_image.split()[0].lstrip("[")) - int(text_only.split()[0].lstrip("[")) > 256
    s.command(f"/image {red}")
    s.command(f"/image {blue}")
    assert "(2 images: 512 image tokens)" in s.ask("What is this?", io.StringIO())


def test_chat_image_command_on_a_text_package_says_why_not(tmp_path):
    s = ChatSession(Engine.get(TINY_QWEN3), max_new_tokens=2)
    assert s.command(f"/image {tmp_path / 'x.png'}") == "[tiny-qwen3 has no vision model: images cannot be sent to it]"


def table_rows(out: str) -> list[list[str]]:
    """The body rows of a rich table: the cells of each line drawn with │."""
    return [
        [c.strip() for c in line.strip("│ ").split("│")]
        for line in out.splitlines()
        if line.startswith("│") and line.strip("│ ").split("│")[0].strip().isdigit()
    ]


def test_bench_table_for_a_plain_package_with_its_chart(capsys, tmp_path):
    png = tmp_path / "plain.png"
    code = main(["bench", str(TINY_QWEN3), "--repeats", "1", "--new-tokens", "1", "--png", str(png)])
    out = capsys.readouterr().out
    assert code == 0
    assert "tiny-qwen3: plain, 1 new tokens" in out
    rows = table_rows(out)
    # No buckets: powers of two up to what fits the window, no padding, one token so no decode speed.
    assert [r[0] for r in rows] == ["32", "64", "128", "256", "512", "1024", "2048"]
    assert all(r[1:3] == ["-", "0"] and float(r[3]) > 0 and r[4] == "-" for r in rows)
    assert f"chart: {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_table_for_a_bucketed_package(capsys):
    code = main(
        [
            "bench",
            str(REPLICAS / "Qwen3-4B_rai_1.8.0_npu_4K"),
            "--provider",
            "cpu",
            "--max-prompt",
            "129",
            "--repeats",
            "2",
            "--new-tokens",
            "3",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "chart:" not in out
    rows = table_rows(out)
    assert [r[:3] for r in rows] == [["128", "-", "0"], ["129", "-", "0"]]  # the CPU ran no bucket
    assert all(float(r[3]) > 0 and float(r[4]) > 0 for r in rows)
    assert "prefill buckets (128, 256) are the NPU's: on this provider prompts run at their own length" in " ".join(
        out.split()
    )


def test_bench_warms_up_on_the_first_rows_shape_before_measuring(monkeypatch):
    from ryzenai_cli.bench import run

    engine = Engine.get(TINY_QWEN3)
    seen: list[int] = []
    real = engine.generate

    def spy(messages, options=None, **kwargs):
        seen.append(len(messages.token_ids))
        return real(messages, options, **kwargs)

    monkeypatch.setattr(engine, "generate", spy)
    rows = run(engine, [32, 64], 2, 2)
    assert seen == [32, 32, 32, 64, 64]  # one unmeasured call of the first shape, then the rows
    assert [r["prompt_tokens"] for r in rows] == [32, 64] and all(r["prefill_bucket"] is None for r in rows)


def test_bench_chart_without_matplotlib_says_what_to_install(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the bench extra was not installed
    code = main(
        [
            "bench",
            str(TINY_QWEN3),
            "--repeats",
            "1",
            "--new-tokens",
            "1",
            "--max-prompt",
            "32",
            "--png",
            str(tmp_path / "x.png"),
        ]
    )
    captured = capsys.readouterr()
    assert code == 2
    assert "drawing the chart needs matplotlib: pip install 'ryzenai-llm[bench]'" in captured.err
    assert not (tmp_path / "x.png").exists()


def test_chat_refuses_an_unknown_command_with_the_list_and_the_closest_one():
    s = ChatSession(Engine.get(TINY_QWEN3), max_new_tokens=2)
    reply = s.command("/imgae /tmp/x.png")
    assert reply is not None and reply.startswith("[unknown command /imgae; did you mean /image? Commands: /reset")
    assert "Not sent to the model" in reply and "//" in reply
    assert s.command("/frobnicate").startswith("[unknown command /frobnicate. Commands:")  # type: ignore[union-attr]
    assert s.command("/systemd is a service manager") is not None  # a command word, not /system's TEXT
    assert s.system is None
    assert s.command("/usr/lib holds libraries") is None  # a path starts a message
    assert s.command("hello") is None


def test_chat_unknown_command_never_reaches_the_model(capsys, monkeypatch):
    from test_cli_interactive import typed

    typed(monkeypatch, ["/imgae", "//etc is a folder", "/exit"])
    code = main(["chat", str(TINY_QWEN3), "--max-new-tokens", "2", "--temperature", "0"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0
    assert "unknown command /imgae; did you mean /image?" in out
    assert out.count("ai> ") == 1  # only the // message was sent


def test_image_paths_lose_the_quotes_a_file_manager_pastes(tmp_path):
    from PIL import Image

    from conftest import MODELS
    from ryzenai_cli.chat import unquote_path

    folder = tmp_path / "with quotes"
    folder.mkdir()
    picture = folder / "my picture.png"
    Image.new("RGB", (32, 24), "red").save(picture)
    for typed_path in (
        f"'{picture}'",
        f'"{picture}"',
        str(picture).replace(" ", "\\ "),
        f"file://{str(picture).replace(' ', '%20')}",
        str(picture),
        f"  '{picture}'  ",
    ):
        assert unquote_path(typed_path) == str(picture), typed_path
    s = ChatSession(Engine.get(MODELS / "tiny-gemma3-vision"), max_new_tokens=2, temperature=0)
    assert s.command(f"/image '{picture}'").startswith("[image 1 attached: 32x24")  # type: ignore[union-attr]
    assert s.command(f'/image "{picture}"').startswith("[image 2 attached: 32x24")  # type: ignore[union-attr]
    assert s.images == [str(picture)] * 2
    assert unquote_path("'unbalanced") == "'unbalanced"
