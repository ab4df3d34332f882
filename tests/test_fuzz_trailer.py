"""The fuzz suite's ``trailer`` category (tests/fuzz_bundle.py; the whole suite runs in
tests/test_fuzz_bundle.py): its ``trusted`` reader accepts a seed exactly as signed and
reports any other accepted bytes as a forgery, so the category can fail."""

from __future__ import annotations

import random

import pytest

from tests import fuzz_bundle


def _as_signed(rng: random.Random, data: bytes, trailer: bytes, others: list[bytes]) -> bytes:
    return data + trailer


def test_a_seed_as_signed_is_accepted_by_the_trusted_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fuzz_bundle, "TRAILER_MUTATIONS", (_as_signed,))
    monkeypatch.setattr(fuzz_bundle, "READERS", {"trusted": fuzz_bundle.READERS["trusted"]})
    report = fuzz_bundle.run({"trailer": 3})
    assert not report.failures and report.accepted["trailer"] == 3


def test_accepted_bytes_that_no_one_signed_are_reported_as_a_forgery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fuzz_bundle, "TRAILER_MUTATIONS", (_as_signed,))
    monkeypatch.setattr(fuzz_bundle, "READERS", {"trusted": fuzz_bundle.READERS["trusted"]})
    monkeypatch.setattr(fuzz_bundle, "genuine", lambda: frozenset())
    report = fuzz_bundle.run({"trailer": 2})
    assert len(report.crashes) == 2 and "Forged" in report.crashes[0]


def test_every_trailer_mutation_is_refused_by_the_trusted_reader() -> None:
    """A short run of the category per mutation: every reader refuses or accepts cleanly,
    and the trusted reader accepts none."""
    for mutation in fuzz_bundle.TRAILER_MUTATIONS:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(fuzz_bundle, "TRAILER_MUTATIONS", (mutation,))
            mp.setattr(fuzz_bundle, "READERS", {"trusted": fuzz_bundle.READERS["trusted"]})
            report = fuzz_bundle.run({"trailer": 15}, seed=len(mutation.__name__))
        assert not report.failures, (mutation.__name__, report.failures[:3])
        assert report.refused["trailer"] >= 10, mutation.__name__  # (an identity is no forgery)
