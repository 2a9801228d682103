"""models/definitions/labels.py: what a label of ours stands for, as notes show it."""
from __future__ import annotations

from models.definitions import labels


def test_our_labels_say_what_they_stand_for_and_names_pass_through():
    assert labels.described(labels.ANY_POOL) == "(any) (jobs that ran on no pool and asked for any GPU type)"
    assert labels.described(labels.UNMAPPED).startswith("(unmapped) (accounts no team_map")
    assert labels.described("a100") == "a100" and labels.described(7) == "7"
    # a Slurm name cannot be taken for one of ours: every label described is in parentheses
    assert all(k.startswith("(") and k.endswith(")") for k in labels.MEANING)
