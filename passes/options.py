"""Pass options: conversion of `name{key=value}` strings to typed dataclass fields."""

from __future__ import annotations

import dataclasses

from dsl.diagnostics import Loc, TkError, error

PIPELINE_LOC = Loc("<pipeline>", 1, 1)


def option_error(pass_name: str, key: str, fields) -> TkError:
    known = ", ".join(f.name for f in fields) or "none"
    return error(PIPELINE_LOC, f"unknown option `{key}` for pass `{pass_name}`", f"options: {known}")


def options_from(cls, pass_name: str, options: dict[str, str]) -> dict:
    """Convert string options to the dataclass field types of `cls`."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    out = {}
    for key, value in options.items():
        if key not in fields:
            raise option_error(pass_name, key, fields.values())
        kind = fields[key].type
        if "int" in str(kind):
            try:
                out[key] = int(value)
            except ValueError:
                raise error(PIPELINE_LOC, f"option `{key}` of `{pass_name}` must be an integer, got `{value}`") from None
        else:
            out[key] = value
    return out
