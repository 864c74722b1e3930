"""`steward audit log --kind` accepts exactly the kinds the steward writes: a kind added in code without the list
would be unreadable by kind, and a typo (`--kind bogus`) used to print "(no entries)" and exit 0."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.records.audit import KINDS

ROOT = Path(__file__).resolve().parents[1]
_RECORD = re.compile(r"""\.record\(\s*(?:kind=)?(?:"([a-z_]+)"|([A-Z_]+)\b)""")


def _written_kinds() -> set[str]:
    import agent.graph.digest as digest
    import agent.records.audit as audit
    import agent.records.savings as savings

    constants = {"SERVED": audit.SERVED, "CONFIRMED": savings.CONFIRMED, "KIND": digest.KIND}
    found = set()
    for path in [*ROOT.joinpath("agent").rglob("*.py"), *ROOT.joinpath("core").rglob("*.py")]:
        for literal, name in _RECORD.findall(path.read_text(encoding="utf-8")):
            found.add(literal or constants[name])
    return found


def test_every_kind_the_code_writes_is_listed_and_nothing_else():
    written = _written_kinds()
    assert len(written) > 10  # the pattern still finds the calls
    assert written == set(KINDS)


def test_an_unknown_kind_is_an_error_naming_the_kinds(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["audit", "log", "--kind", "bogus"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'bogus'" in err and "'execution'" in err
