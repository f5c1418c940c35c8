"""Typed, validated settings of a run: what every program's frozen run configuration is made of
(verify.learning.run_config.SgdRun for verify.sgd, with a family's Settings inside it;
kernel_vs_sgd.KernelRun for verify.kernel; verify.images.config.ImageRun for
verify.images.train).

A setting is a dataclass field made by `setting(default, validator)`: the validator is the
type its program's flag parses with (verify.cli: positive_int, open_fraction, …), so a value
from a study file (4, 0.25, "1e-3") is read exactly as its text would be on the command line,
and a bad one is refused in that flag's words. `check_fields` holds an instance to its
validators (4, not 4.0 or "4"), which is what each run's `__post_init__` calls: a
`dataclasses.replace` is checked as a new run is.

No torch here: the parsers are built from these, and `--help` answers without torch.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import field, fields

from verify.cli import UsageError


def choice(names) -> Callable[[str], str]:
    """A validator for one of `names` (argparse's `choices`, as a type)."""
    def check(text: str) -> str:
        if text not in names:
            raise ValueError(f"invalid choice: {text!r} (choose from {', '.join(map(str, names))})")
        return text
    check.names = tuple(names)  # the flag's choices (add_setting_flags)
    return check


def switch(value) -> bool:
    """The validator of an on/off setting (a flag without a value): True or False only."""
    if not isinstance(value, bool):
        raise ValueError(f"a switch is true or false, not {value!r}")
    return value


def setting(default, check: Callable, many: bool = False, optional: bool = False, help: str | None = None):
    """A field of a run's settings with its validator (its flag's type), and whether it holds
    several values (`many`, a tuple) or may be None, not set (`optional`). With `help`, the
    setting declares its own flag (add_setting_flags); without, its flag is declared elsewhere."""
    return field(default=default, metadata=dict(check=check, many=many, optional=optional, help=help))


def flag(name: str) -> str:
    """A setting's flag."""
    return "--" + name.replace("_", "-")


def checked(name: str, value, check: Callable, many: bool = False):
    """`value` (or each of its items, `many`) through `check` as a parser reads a flag's text:
    the typed value; UsageError '--name: …' otherwise. A value typed as a study file types it
    (4, 0.25, "1e-3") is read as its text would be on the command line."""
    if many:  # one value or several, as the flag takes them (`shapes: matched` is --shapes matched)
        values = value if isinstance(value, list | tuple) else [value]
        if not values:
            raise UsageError(f"{flag(name)}: expected one or more values, got {value!r}")
        return tuple(checked(name, v, check) for v in values)
    try:
        return check(value) if check is switch else check(str(value))
    except (ValueError, argparse.ArgumentTypeError) as e:
        raise UsageError(f"{flag(name)}: {e}") from None


def check_fields(obj) -> None:
    """UsageError unless each setting of `obj` is what its validator reads it as (4, not 4.0
    or "4")."""
    for f in fields(obj):
        if "check" not in f.metadata:
            continue
        value = getattr(obj, f.name)
        if value is None and f.metadata["optional"]:
            continue
        typed_value = checked(f.name, value, f.metadata["check"], f.metadata["many"])
        if typed_value != value or type(typed_value) is not type(value):
            raise UsageError(f"{flag(f.name)}: expected {type(typed_value).__name__} {typed_value!r}, "
                             f"got {value!r}")


def typed(owner, name: str, value):
    """`value` of the setting `name` of dataclass `owner`, read by its validator (as it is,
    for a field that is no setting)."""
    meta = next((f.metadata for f in fields(owner) if f.name == name), None)
    if meta is None or "check" not in meta:
        return value
    if value is None and meta["optional"]:
        return None
    return checked(name, value, meta["check"], meta["many"])


def setting_fields(owner) -> tuple[str, ...]:
    """The names of `owner`'s settings (its fields made by `setting`)."""
    return tuple(f.name for f in fields(owner) if "check" in f.metadata)


def given_settings(owner, given: dict, program: str) -> dict:
    """`given` (settings by name; None counts as not given) typed by `owner`'s validators;
    UsageError for a name that is no setting of `program`."""
    names = setting_fields(owner)
    given = {k: v for k, v in given.items() if v is not None}
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise UsageError(f"{program} has no setting {unknown[0]!r}")
    return {k: typed(owner, k, v) for k, v in given.items()}


def runtime_of(runtime_class, namespace) -> object:
    """The runtime settings (a dataclass) that a parsed command line gives, by name."""
    return runtime_class(**{f.name: getattr(namespace, f.name) for f in dataclasses.fields(runtime_class)
                            if hasattr(namespace, f.name)})


def typed_only(parser: argparse.ArgumentParser, names) -> argparse.ArgumentParser:
    """`parser` with no default for the settings `names`: what it parses holds only what was
    typed (the run's dataclass gives the rest its default, one source; tests hold the help's
    stated defaults to those)."""
    for action in parser._actions:
        if action.dest in names:
            action.default = argparse.SUPPRESS
    return parser


def shown(value) -> str:
    """A default as a flag's help states it: 0.01, 16, 0.9, a b for several."""
    if isinstance(value, tuple | list):
        return " ".join(map(shown, value))
    return format(value, "g") if isinstance(value, float) else str(value)


def add_setting_flags(parser, owner, prefix: str | None = None, defaults: dict | None = None) -> None:
    """A flag for each setting of dataclass `owner` that declares its help, in field order: its
    validator as the type (a choice's names as the choices), several values for a `many`
    setting, and its default stated in the help, from the field (or from `defaults` where the
    field's is None: a default that depends on other settings), the one source; the flag has
    no default of its own (the dataclass fills it). A switch is a flag without a value.
    `prefix` starts each help (a family's name)."""
    for f in fields(owner):
        meta = f.metadata
        if meta.get("help") is None:
            continue
        text = f"{prefix}: {meta['help']}" if prefix else meta["help"]
        if meta["check"] is switch:
            parser.add_argument(flag(f.name), action="store_true", help=text)
            continue
        default = f.default if f.default is not None else (defaults or {}).get(f.name)
        stated = "" if default is None else f" (default {shown(default)})"
        names = getattr(meta["check"], "names", None)
        kind = dict(choices=names) if names else dict(type=meta["check"])
        parser.add_argument(flag(f.name), nargs="+" if meta["many"] else None, help=text + stated, **kind)
