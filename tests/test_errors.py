"""tuner.errors: one base for the errors a user can fix, each still the built-in it replaced."""

import pytest

import tuner.errors as errors

BUILTIN = {"SpecError": ValueError, "BudgetError": ValueError, "StudyConflictError": ValueError,
           "LauncherError": ValueError, "TrialConfigError": ValueError, "PreflightError": ValueError,
           "StorageError": RuntimeError, "StorageUnreachableError": RuntimeError, "CircuitBreakerError": RuntimeError,
           "OutputError": RuntimeError}


def test_every_error_is_a_tuner_error_and_the_builtin_it_replaced():
    assert set(errors.__all__) == {"TunerError", *BUILTIN}
    for name, builtin in BUILTIN.items():
        cls = getattr(errors, name)
        assert issubclass(cls, errors.TunerError) and issubclass(cls, builtin), name


def test_code_that_caught_the_builtin_still_catches_it():
    with pytest.raises(ValueError, match="bad key"):
        raise errors.SpecError("spec.toml: bad key")
    with pytest.raises(errors.TunerError):
        raise errors.StorageError("sqlite:///x.db: locked")


def test_the_tuner_error_base_is_no_builtin_so_a_bug_is_never_mistaken_for_one():
    assert not issubclass(errors.TunerError, (ValueError, RuntimeError))
    assert not issubclass(ValueError, errors.TunerError)


def test_errors_doctests_run():
    import doctest

    result = doctest.testmod(errors)
    assert result.failed == 0 and result.attempted > 0
