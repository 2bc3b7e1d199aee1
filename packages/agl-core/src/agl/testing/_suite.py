"""What every conformance suite in :mod:`agl.testing` checks about itself."""

from __future__ import annotations

__all__ = ["check_suite_intact"]


def check_suite_intact(case: object, suite: type, label: str) -> None:
    """Fail if ``case`` (an instance of a subclass of ``suite``) deleted a suite test, or
    overrode one without ``@pytest.mark.xfail(reason=...)``.

    Args:
        case: The running test class's instance.
        suite: The conformance suite's class.
        label: The suite's name, for the message (``"store conformance suite"``).
    """
    for name in dir(suite):  # the suite's own tests and those of the parts it is made of
        if not name.startswith("test_"):
            continue
        member = getattr(suite, name)
        mine = getattr(type(case), name, None)
        assert mine is not None, f"{name} was deleted from the {label}"
        if mine is member:
            continue
        marks = [mark for mark in getattr(mine, "pytestmark", []) if mark.name == "xfail"]
        reason = marks[0].kwargs.get("reason") if marks else None
        assert reason, f"{name} is overridden without @pytest.mark.xfail(reason=...)"
