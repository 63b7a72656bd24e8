"""Whose error: kvstress's own (never a finding) or the pool's (a crash), by the frames it passed."""

from __future__ import annotations

import functools

from kvstress._blame import InternalError, describe, internal_error, raised_in_kvstress
from kvstress.controlled._patch import resolve_modules
from kvstress.mutants import _condvar_pool


def _caught(call: functools.partial[object]) -> BaseException:
    try:
        call()
    except Exception as error:
        return error
    raise AssertionError("did not raise")


def _kvstress_raises() -> BaseException:
    """An error raised inside kvstress, caught where kvstress would catch it: a C partial calls
    kvstress's resolve_modules, so no frame of this file is between."""
    try:
        functools.partial(resolve_modules, [42])()
    except ValueError as error:
        error.__traceback__ = error.__traceback__.tb_next if error.__traceback__ else None
        return error
    raise AssertionError("did not raise")


def test_an_error_of_kvstress_alone_is_kvstress_s() -> None:
    error = _kvstress_raises()
    assert raised_in_kvstress(error)
    assert "ValueError" in describe(error) and "_patch.py" in describe(error)
    assert isinstance(internal_error(error), InternalError)
    assert "not the pool's" in str(internal_error(error))


def test_a_frame_of_the_user_s_code_on_the_way_makes_it_the_pool_s() -> None:
    """This file is outside kvstress and the installation, as a user's pool is."""

    def pool_code() -> None:
        resolve_modules([42])

    assert not raised_in_kvstress(_caught(functools.partial(pool_code)))


def test_an_error_raised_from_the_pool_s_error_is_the_pool_s() -> None:
    def pool_code() -> None:
        raise KeyError(3)

    pool_error = _caught(functools.partial(pool_code))
    ours = _kvstress_raises()
    ours.__cause__ = pool_error
    assert not raised_in_kvstress(ours)
    group = BaseExceptionGroup("tasks", [_kvstress_raises(), pool_error])
    assert not raised_in_kvstress(group)


def test_a_pool_inside_kvstress_counts_as_the_pool_when_named() -> None:
    """The corpus's pools live in kvstress/mutants: their files are passed as the pool's."""
    pool = _condvar_pool.CondvarPool(1, (1,))
    try:
        pool.release(object())  # a handle the pool does not know: it raises in its own code
    except Exception as raised:
        error = raised
        error.__traceback__ = error.__traceback__.tb_next if error.__traceback__ else None
    assert raised_in_kvstress(error)  # its frames are all under kvstress/...
    assert not raised_in_kvstress(error, frozenset({_condvar_pool.__file__}))  # ...but it is the pool


def test_an_error_with_no_frames_is_nobody_s_in_particular() -> None:
    assert not raised_in_kvstress(ValueError("never raised"))
