"""The labelled log tails and their scoring (evals/log_progress_eval.py); the model's part runs against an endpoint."""

from __future__ import annotations

from collections import Counter

import pytest

from evals.log_progress_eval import LABELS, TailError, evaluate, load_tails, regex_working


def test_the_set_covers_both_languages_and_every_label():
    tails = load_tails()
    assert len(tails) >= 60
    counts = Counter((t.lang, t.label) for t in tails)
    assert all(counts[(lang, label)] >= 8 for lang in ("en", "zh") for label in LABELS), counts


def test_regex_is_scored_per_language_and_working_jobs_judged_idle_are_counted():
    result = evaluate(load_tails())
    rows = {r["id"]: r for r in result["rows"]}
    assert rows["en-prog-custom-it"]["regex"] is True  # counters that move
    assert rows["zh-stall-same-step"]["regex"] is False  # the same step again and again
    summary = result["summary"]
    assert summary["all"]["tails"] == summary["en"]["tails"] + summary["zh"]["tails"]
    wrong = sum(r["regex"] != r["working"] for r in result["rows"])
    assert summary["all"]["regex"]["accuracy"] == round(1 - wrong / len(rows), 3)
    missed = sum(r["working"] and not r["regex"] for r in result["rows"])
    assert summary["all"]["regex"]["working_judged_not"] == missed
    assert summary["all"]["model"]["accuracy"] is None  # no endpoint given


def test_a_bad_tail_is_refused_naming_it(tmp_path):
    bad = tmp_path / "tails.yaml"
    bad.write_text("tails:\n- {id: a, lang: en, label: sleeping, lines: 'x'}\n", encoding="utf-8")
    with pytest.raises(TailError, match=r"tails\[0\]\.label is 'sleeping'"):
        load_tails(bad)
    bad.write_text("tails:\n- {id: a, lang: fr, label: stalled, lines: 'x'}\n", encoding="utf-8")
    with pytest.raises(TailError, match=r"tails\[0\]\.lang is 'fr'"):
        load_tails(bad)


def test_a_first_sighting_is_not_movement():
    tail = next(t for t in load_tails() if t.id == "en-stall-nccl-watchdog")
    assert regex_working(tail) is False  # one step line, then only watchdog timeouts
