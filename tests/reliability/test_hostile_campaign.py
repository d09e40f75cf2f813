"""The hostile-file campaign (see hostile_campaign.py), bounded for CI: every fixed kind of
issue 23 once, then seeded random mutations of valid checkpoints, weights and ``.npz`` files for
about 25 seconds. Each case: an exit status in the documented set, a refusal in one line, no
traceback, no partial file, no hang."""

from __future__ import annotations

from hostile_campaign import campaign

FIXED_KINDS = 15


def test_hostile_files_lose_nothing_and_print_no_traceback(tmp_path):
    tally = campaign(tmp_path, cases=200, seed=0, budget=25.0)
    assert not tally.failures, "\n".join(tally.failures)
    random = sum(tally.cases.values()) - FIXED_KINDS
    assert len(tally.cases) >= FIXED_KINDS and random >= 10, tally.cases
    refused = sum(n for (kind, code), n in tally.codes.items() if code == 2)
    assert refused >= FIXED_KINDS - 1  # every fixed kind but integer features is refused
    assert tally.codes["integer features", 0] == 1  # converted with a note, and trained
