"""Argument parsing shared by several commands."""

from __future__ import annotations

import contextlib
import errno
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

import click

from jobgate.core.errors import ValidationError
from jobgate.core.tokens import TENANT_RULE, is_tenant_name


def parse_params(values: tuple[str, ...]) -> dict[str, str]:
    params: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValidationError(f"{item!r} is not of the form key=value", field="--param")
        if key in params:  # which value counts would be a guess: say so, store nothing
            raise ValidationError(f"{key!r} is given more than once ({params[key]!r}, {value!r})", field="--param")
        params[key] = value
    return params


class FiniteFloat(click.FloatRange):
    """``click.FloatRange`` that also refuses ``nan`` and ``inf``: NaN compares false with every
    bound, so it passed the range and crashed later (``timedelta(seconds=nan)``, exit 70)."""

    name = "finite number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


NAME_RULE = "1 to 200 characters, none a control or invisible one (line break, escape, direction override)"


def printable_name(name: str) -> bool:
    """Whether ``name`` may stand for who acts: not blank, at most 200 characters, and printing
    as itself (``core.params.readable_value``)."""
    from jobgate.core.params import readable_value

    return bool(name.strip()) and len(name) <= 200 and readable_value(name)


class PersonName(click.ParamType):  # type: ignore[type-arg]
    """``--by``: who acts, as the record and every listing will print it. Text that would not
    print as itself (a terminal escape, a direction override, a line break) is refused: a
    review's ``--by $'evil\\x1b[2J'`` was stored and printed raw."""

    name = "name"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        if not printable_name(value):
            self.fail(NAME_RULE, param, ctx)
        return value


PERSON = PersonName()


def os_user() -> str:
    """Who acts when ``--by`` is left out: the OS user, held to ``--by``'s rule (a review's
    ``LOGNAME`` with a line break and a terminal escape was stored and printed as it was)."""
    import getpass

    from jobgate.core.errors import ValidationError

    name = getpass.getuser()
    if not printable_name(name):
        raise ValidationError("the OS user's name would not print as itself: name who acts with --by", field="--by")
    return name


@contextlib.contextmanager
def new_output(path: Path, field: str, *, mode: int = 0o644) -> Iterator[IO[bytes]]:
    """The file a command writes, created (exclusively, with ``mode``) before the command reads
    or records anything: an existing file, a missing folder or one it may not write is refused
    naming ``field``, so a refused export leaves no audit entry claiming it was made. If the
    command fails after that, the file it had begun is removed."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        raise ValidationError(f"{path} exists; refusing to overwrite it", field=field) from None
    except FileNotFoundError:
        raise ValidationError(f"{path.parent} is not a folder that exists", field=field) from None
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno is not None else str(exc)
        if exc.errno in (errno.EISDIR, errno.ENOTDIR):
            reason = f"{path} is not a file path"
        raise ValidationError(f"cannot create {path}: {reason}", field=field) from None
    handle = os.fdopen(fd, "wb")
    try:
        yield handle
    except BaseException:
        handle.close()
        with contextlib.suppress(OSError):
            path.unlink()
        raise
    handle.close()


def _tenant_name(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """A ``--tenant`` that names no tenant (a leading space, a quote, another script's letter
    that prints alike) is refused: read and maintenance commands otherwise answered "0 to
    delete", "none" or empty series for it, as if the tenant had nothing (found by a review)."""
    if value is not None and not is_tenant_name(value):
        raise ValidationError(f"{value!r}: {TENANT_RULE}", field="--tenant")
    return value


def given(name: str) -> bool:
    """Whether the running command's option ``name`` was written on its command line (or in
    the environment), not left at its default: ``--tenant default`` is then told from no
    ``--tenant``."""
    ctx = click.get_current_context(silent=True)
    source = None if ctx is None else ctx.get_parameter_source(name)
    return source is not None and source is not click.core.ParameterSource.DEFAULT


_Command = TypeVar("_Command", bound=Callable[..., Any])


def tenant_option(*, default: str | None = "default", help: str | None = None) -> Callable[[_Command], _Command]:
    """The ``--tenant`` option of every command: one rule for what it accepts."""
    said = help or ("the tenant acted in" if default is not None else "only this tenant's (default: every tenant's)")
    return click.option("--tenant", default=default, show_default=default is not None, help=said, callback=_tenant_name)


def signing_key_options(
    *, key_id: str, key: str = "the private key file (from keys generate)"
) -> Callable[[_Command], _Command]:
    """``--key-id`` and ``--key`` of every command that signs: the same two options, each
    command saying whose key it wants."""

    def apply(command: _Command) -> _Command:
        command = click.option(
            "--key", "key_file", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path), help=key
        )(command)
        return click.option("--key-id", required=True, help=key_id)(command)

    return apply
