"""The admission rule (``core.governance.admit``), case by case and as properties: every gate at
every moment, which refusals are holds and which are final, and four eyes between people."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobgate.core.governance import (
    ADMITTED,
    ApprovalFact,
    ApprovalRule,
    Code,
    CodeFact,
    Facts,
    Moment,
    Person,
    SafeModeFact,
    Subject,
    TrustFact,
    admit,
    approval_refusal,
    how_related,
    request_refusal,
    same_person,
)
from jobgate.core.models import DefinitionStatus, JobClass, TriggerType
from jobgate.core.policy import Blackout, Policy
from jobgate.core.trust import Licence, LicenceState

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DIGEST = "sha256:" + "a" * 64
CODE = "sha256:" + "c" * 64
SUBJECT = Subject("acme", "export", 3, DIGEST, JobClass.FEDERATION_SYNC_JOB, TriggerType.CRON, "normal")
APPROVED = ApprovalFact(DIGEST, CODE, NOW - timedelta(days=1))
LICENCE = LicenceState(Licence("L-1", "acme", frozenset({"sync"}), NOW + timedelta(days=30), None))
CREATING = [m for m in Moment if m.creates]


def facts(moment: Moment = Moment.ATTEMPT, **changes: object) -> Facts:
    base = Facts(moment, SUBJECT, NOW, approval=APPROVED)
    if moment is Moment.ATTEMPT and "code" not in changes:
        changes["code"] = CodeFact(CODE)
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize("moment", list(Moment))
def test_an_approved_subject_with_nothing_against_it_is_admitted(moment: Moment) -> None:
    assert admit(facts(moment)) == ADMITTED


@pytest.mark.parametrize("moment", CREATING)
def test_no_approval_refuses_every_creation(moment: Moment) -> None:
    v = admit(facts(moment, approval=None))
    assert (v.admitted, v.code, v.final) == (False, Code.NOT_APPROVED, False)


@pytest.mark.parametrize("moment", [Moment.ATTEMPT, Moment.RELEASE])
def test_an_approval_gone_before_an_attempt_is_final(moment: Moment) -> None:
    v = admit(facts(moment, approval=None))
    assert (v.admitted, v.code, v.final) == (False, Code.APPROVAL_REVOKED, True)


def test_an_approval_of_another_digest_does_not_count() -> None:
    other = replace(APPROVED, digest="sha256:" + "b" * 64)
    assert admit(facts(Moment.TRIGGER, approval=other)).code is Code.NOT_APPROVED


def test_code_is_judged_only_where_code_is_about_to_run() -> None:
    changed = CodeFact("sha256:" + "d" * 64, ("package:mine",))
    v = admit(facts(Moment.ATTEMPT, code=changed))
    assert (v.code, v.final, v.field) == (Code.CODE_CHANGED, False, "code_digest")
    assert "package:mine changed" in v.message
    assert admit(facts(Moment.TRIGGER, code=None)).admitted  # no code is about to run at a trigger


def test_unreadable_code_and_an_approval_without_code_are_holds() -> None:
    assert admit(facts(code=CodeFact(None, (), "not installed"))).code is Code.CODE_CHANGED
    v = admit(facts(approval=replace(APPROVED, code_digest=None)))
    assert (v.code, v.final) == (Code.CODE_NOT_APPROVED, False)


@pytest.mark.parametrize("moment", list(Moment))
def test_safe_mode_suspends_its_classes_at_every_moment(moment: Moment) -> None:
    period = SafeModeFact(4, "drift", frozenset({"FEDERATION_SYNC_JOB"}))
    v = admit(facts(moment, safe_mode=period))
    assert (v.code, v.rule, v.final) == (Code.SAFE_MODE, "suspended_class:FEDERATION_SYNC_JOB", False)
    other = replace(SUBJECT, job_class=JobClass.REPLAY_JOB)
    assert admit(facts(moment, subject=other, safe_mode=period)).admitted


def test_safe_mode_never_holds_the_safe_mode_job_it_triggers() -> None:
    period = SafeModeFact(1, "x", frozenset({"SAFE_MODE_JOB"}), manual_review=True)
    job = replace(SUBJECT, job_class=JobClass.SAFE_MODE_JOB, trigger_type=TriggerType.SAFE_MODE)
    assert admit(facts(subject=job, safe_mode=period)).admitted


@pytest.mark.parametrize("moment", list(Moment))
def test_a_definition_naming_itself_safe_mode_job_is_reviewed_like_any_manual_run(moment: Moment) -> None:
    period = SafeModeFact(1, "x", frozenset(), manual_review=True)
    manual = replace(SUBJECT, job_class=JobClass.SAFE_MODE_JOB, trigger_type=TriggerType.MANUAL)
    assert admit(facts(moment, subject=manual, safe_mode=period)).rule == "manual_review_required"
    assert admit(facts(moment, subject=replace(manual, reviewed=True), safe_mode=period)).admitted


@pytest.mark.parametrize("moment", list(Moment))
def test_manual_review_binds_unreviewed_manual_runs_at_every_moment(moment: Moment) -> None:
    period = SafeModeFact(2, "incident", manual_review=True)
    manual = replace(SUBJECT, trigger_type=TriggerType.MANUAL)
    assert admit(facts(moment, subject=manual, safe_mode=period)).rule == "manual_review_required"
    assert admit(facts(moment, subject=replace(manual, reviewed=True), safe_mode=period)).admitted
    assert admit(facts(moment, safe_mode=period)).admitted  # a cron run needs no review


def test_trust_gates_bind_a_subject_that_declares_permissions() -> None:
    licensed = replace(SUBJECT, permissions=("sync",))
    assert admit(facts(subject=licensed, trust=TrustFact(LICENCE, frozenset({"sync"})))).admitted
    down = admit(facts(subject=licensed, trust=TrustFact(LICENCE, None)))
    assert (down.code, down.rule, down.final) == (Code.TRUST_GATE, "environment_unreachable", False)
    assert admit(facts(subject=licensed, trust=None)).rule == "licence_missing"  # nothing read: fail closed
    assert admit(facts(trust=None)).admitted  # no permissions, no gate


def test_policy_quotas_and_reasons_judge_creations_blackouts_judge_every_start() -> None:
    policy = Policy("P", 1, "sha256:p", reason_rule="SP-REASON", quota_rule="SP-QUOTA", runs_per_day=1)
    manual = replace(SUBJECT, trigger_type=TriggerType.MANUAL)
    assert admit(facts(Moment.TRIGGER, subject=manual, policy=policy)).rule == "SP-REASON"
    assert admit(facts(Moment.ATTEMPT, subject=manual, policy=policy)).admitted
    assert admit(facts(Moment.TRIGGER, policy=policy, runs_today=1)).rule == "SP-QUOTA"
    assert admit(facts(Moment.ATTEMPT, policy=policy, runs_today=1)).admitted  # the run already counts
    freeze = Blackout("SP-FREEZE", NOW - timedelta(hours=1), NOW + timedelta(hours=1))
    frozen = Policy("P", 2, "sha256:q", blackouts=(freeze,))
    for moment in Moment:
        v = admit(facts(moment, policy=frozen))
        assert (v.code, v.rule, v.final) == (Code.POLICY, "SP-FREEZE", False)


def test_lifecycle_suspended_holds_retired_ends_the_run() -> None:
    v = admit(facts(definition_status=DefinitionStatus.SUSPENDED))
    assert (v.code, v.final) == (Code.DEFINITION_INACTIVE, False)
    v = admit(facts(definition_status=DefinitionStatus.RETIRED))
    assert (v.code, v.final) == (Code.DEFINITION_RETIRED, True)
    assert admit(facts(Moment.TRIGGER, definition_status=DefinitionStatus.RETIRED)).code is Code.DEFINITION_INACTIVE


def test_a_signature_that_no_longer_holds_is_a_hold() -> None:
    v = admit(facts(signature_problem="signed by an untrusted key"))
    assert (v.code, v.final, v.message) == (Code.NOT_SIGNED, False, "signed by an untrusted key")


def test_the_first_rule_in_order_names_the_refusal() -> None:
    everything = facts(
        approval=None,
        safe_mode=SafeModeFact(1, "x", frozenset({"FEDERATION_SYNC_JOB"})),
        signature_problem="bad",
        definition_status=DefinitionStatus.SUSPENDED,
    )
    assert admit(everything).code is Code.DEFINITION_INACTIVE
    assert admit(replace(everything, definition_status=DefinitionStatus.ACTIVE)).code is Code.APPROVAL_REVOKED


def test_a_refusal_carries_its_code_rule_and_field() -> None:
    v = admit(facts(Moment.TRIGGER, approval=None))
    exc = v.refusal()
    assert (exc.code, exc.rule, exc.field) == ("definition_not_approved", "content_approval", "job_definition_id")


moments = st.sampled_from(list(Moment))
classes = st.sampled_from(list(JobClass))
triggers = st.sampled_from(list(TriggerType))


@given(moment=moments, job_class=classes, trigger=triggers, reviewed=st.booleans(), suspend=st.sets(classes))
def test_property_safe_mode_refuses_exactly_its_classes_and_unreviewed_manual_runs(
    moment: Moment, job_class: JobClass, trigger: TriggerType, reviewed: bool, suspend: set[JobClass]
) -> None:
    subject = replace(SUBJECT, job_class=job_class, trigger_type=trigger, reviewed=reviewed)
    period = SafeModeFact(1, "p", frozenset(c.value for c in suspend), manual_review=True)
    v = admit(facts(moment, subject=subject, safe_mode=period))
    exempt = job_class is JobClass.SAFE_MODE_JOB and trigger is TriggerType.SAFE_MODE
    expected = not exempt and (job_class in suspend or (trigger is TriggerType.MANUAL and not reviewed))
    assert (not v.admitted) is expected
    if not v.admitted:
        assert v.code is Code.SAFE_MODE and not v.final


@given(moment=moments, approved=st.booleans(), revoked_digest=st.booleans())
def test_property_only_a_lost_approval_before_an_attempt_is_final(
    moment: Moment, approved: bool, revoked_digest: bool
) -> None:
    approval = APPROVED if approved else None
    if approval is not None and revoked_digest:
        approval = replace(approval, digest="sha256:" + "0" * 64)
    v = admit(facts(moment, approval=approval))
    has = approved and not revoked_digest
    assert v.admitted is has
    assert v.final is (not has and not moment.creates)


# ---------------------------------------------------------------------- four eyes
ALICE = Person("alice")
BOB = Person("bob")
ALICE_AGAIN = Person("alice", ())
MINTED_BY_ALICE = Person("mallory", ("alice",))
MINTED_TWICE = Person("eve", ("mallory", "alice"))


def test_same_person_follows_names_and_minting_both_ways_and_through_chains() -> None:
    assert same_person(ALICE, ALICE_AGAIN)
    assert not same_person(ALICE, BOB)
    assert same_person(ALICE, MINTED_BY_ALICE) and same_person(MINTED_BY_ALICE, ALICE)
    assert same_person(ALICE, MINTED_TWICE) and same_person(MINTED_TWICE, MINTED_BY_ALICE)
    assert not same_person(BOB, MINTED_TWICE)
    # One principal minted both credentials over the API: it saw both secrets, so four eyes
    # cannot tell its two "people" apart (a review minted ev-s1 and ev-s2 and approved its own
    # program). People get credentials on the host (no minter) or from an identity provider.
    carol, dave = Person("carol", ("root",)), Person("dave", ("root",))
    assert same_person(carol, dave)
    assert how_related(carol, dave, "proposed this request") == (
        "root minted both carol's credential and that of dave, who proposed this request"
    )
    assert not same_person(Person("carol"), Person("dave"))  # made on the host: two people
    assert same_person(Person("frank", ("bob", "root")), Person("grace", ("root",)))  # cousins share root


def test_names_differing_only_in_case_or_width_are_one_person() -> None:
    """Found by a review: "alice" applied (or proposed) and a token named "Alice" approved it;
    to a reader of the record they are one person, and so they are to four eyes."""
    assert same_person(Person("alice"), Person("Alice"))
    assert same_person(Person("oidc:Straße"), Person("oidc:STRASSE"))
    assert same_person(Person("\uff41lice"), Person("alice"))  # full-width a
    assert same_person(Person("zed", ("ALICE",)), Person("alice"))
    assert how_related(Person("Alice"), Person("alice"), "applied this version") == "Alice applied this version"
    assert how_related(Person("zed", ("ALICE",)), Person("alice"), "proposed it") == (
        "zed's credential was minted by alice, who proposed it"
    )
    assert not same_person(Person("alice"), Person("alicia"))
    # found by a regression review: `--by 'oleg '` approved what oleg applied
    for disguised in ("oleg ", "oleg\u200b", "oleg\t", "ol\u200beg", " OLEG", "o l e g"):
        assert same_person(Person(disguised), Person("oleg")), repr(disguised)


@given(
    st.tuples(st.sampled_from("abcdef"), st.lists(st.sampled_from("abcdef"), max_size=3)),
    st.tuples(st.sampled_from("abcdef"), st.lists(st.sampled_from("abcdef"), max_size=3)),
)
def test_same_person_is_symmetric_and_means_a_shared_principal(
    a: tuple[str, list[str]], b: tuple[str, list[str]]
) -> None:
    x, y = Person(a[0], tuple(a[1])), Person(b[0], tuple(b[1]))
    assert same_person(x, y) == same_person(y, x) == bool({a[0], *a[1]} & {b[0], *b[1]})
    if same_person(x, y):
        assert how_related(x, y, "did it")  # every related pair is explained


def test_content_four_eyes_only_when_asked_or_when_the_body_is_code() -> None:
    off = ApprovalRule(four_eyes=False, executes_body=False)
    assert approval_refusal(off, ALICE, [ALICE]) is None
    on = ApprovalRule(four_eyes=True, executes_body=False)
    assert approval_refusal(on, ALICE, [ALICE]).rule == "applier_cannot_approve"  # type: ignore[union-attr]
    assert approval_refusal(on, MINTED_BY_ALICE, [ALICE]) is not None
    assert approval_refusal(on, BOB, [ALICE]) is None
    assert approval_refusal(on, BOB, []) is None  # applied before appliers were recorded
    code = ApprovalRule(four_eyes=False, executes_body=True)
    assert approval_refusal(code, ALICE, [ALICE]) is not None
    assert approval_refusal(code, BOB, []).rule == "applier_unknown"  # type: ignore[union-attr]
    assert approval_refusal(code, BOB, [ALICE]) is None


def test_a_request_is_never_approved_by_its_requester_or_their_minted_credentials() -> None:
    assert request_refusal(ALICE, ALICE_AGAIN) is not None
    assert request_refusal(MINTED_BY_ALICE, ALICE) is not None
    assert request_refusal(ALICE, MINTED_BY_ALICE) is not None
    assert request_refusal(BOB, ALICE) is None


def test_a_four_eyes_refusal_names_each_person_for_what_they_did() -> None:
    """The approver is named as the approver, the proposer or applier as such, and the minting
    between them said in its direction (the refusal of a transitively minted token named the
    approver as the proposer)."""
    assert request_refusal(ALICE, ALICE_AGAIN).message.startswith("alice proposed this request")  # type: ignore[union-attr]
    assert request_refusal(MINTED_TWICE, ALICE).message.startswith(  # type: ignore[union-attr]
        "eve's credential was minted by alice, who proposed this request"
    )
    assert request_refusal(ALICE, MINTED_BY_ALICE).message.startswith(  # type: ignore[union-attr]
        "alice minted the credential of mallory, who proposed this request"
    )
    on = ApprovalRule(four_eyes=True, executes_body=False)
    refused = approval_refusal(on, MINTED_BY_ALICE, [BOB, ALICE])
    assert refused is not None and refused.message.startswith("mallory's credential was minted by alice, who applied")
