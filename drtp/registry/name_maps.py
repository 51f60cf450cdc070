"""How ``repository_map:`` turns a trace's repository name into a registry's, as rules on strings.

The modes (``prefix``, ``flatten``, a template) are explained with
:class:`drtp.registry.repo_names.RepositoryMap`, which maps a run's names through
:func:`map_name`.  The rules need no config and no registry, so the config checks a
``repository_map`` with :func:`mapping_error` when it loads, before anything runs.
"""

from __future__ import annotations

import string

from drtp.registry.names import name_error

MODES = ("prefix", "flatten")
FIELDS = ("prefix", "user", "repo", "name")
# trace names a template is tried on when the config is loaded: two levels (the IBM traces), three, one
SAMPLES = ("user0/repo0", "user0/team0/repo0", "repo0")


def template_error(template: str) -> str | None:
    """None when ``template`` is a usable template; otherwise what is wrong with it."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        return f"template {template!r}: {e}"
    used = set()
    for _text, field, spec, conversion in parsed:
        if field is None:
            continue
        if field not in FIELDS or spec or conversion:
            shown = "{" + field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            return f"template {template!r}: unknown placeholder {shown} (use {{prefix}}, {{user}}, {{repo}}, {{name}})"
        used.add(field)
    if not used & {"repo", "name"}:
        return f"template {template!r} has neither {{repo}} nor {{name}}: every trace repository would map to one"
    return None


def uses_prefix(mode: str) -> bool:
    """Whether ``mode`` puts the prefix in the name itself: ``prefix``, ``flatten``, or a template with
    ``{prefix}`` (a usable one: see :func:`template_error`)."""
    if mode in MODES:
        return True
    return any(field == "prefix" for _text, field, _spec, _conv in string.Formatter().parse(mode))


def mapping_error(mode: str, prefix: str) -> str | None:
    """None when ``repository_map: mode`` with ``repository: prefix`` maps sample names to valid names."""
    if mode not in MODES:
        if "{" not in mode:
            return f"{mode!r} is neither prefix, flatten nor a template with {{prefix}}, {{user}}, {{repo}}, {{name}}"
        if why := template_error(mode):
            return why
    for sample in SAMPLES:
        mapped = map_name(mode, prefix, sample)
        if why := name_error(mapped):
            return f"trace repository {sample!r} would become {mapped!r}: {why}"
    return None


def map_name(mode: str, prefix: str, name: str, namespace: str = "") -> str:
    """``name`` under ``mode`` (the modes: drtp.registry.repo_names), in a repetition's ``namespace``; no checks."""
    user, slash, rest = name.partition("/")
    if not slash:
        return prefix + namespace + name
    if mode == "prefix":
        return prefix + namespace + name
    repo = rest.replace("/", "-")
    if mode == "flatten":
        return f"{prefix}{namespace}{user}-{repo}"
    if not namespace or uses_prefix(mode):
        return mode.format(prefix=prefix + namespace, user=user, repo=repo, name=name)
    head, slash, last = mode.format(prefix=prefix, user=user, repo=repo, name=name).rpartition("/")
    return f"{head}{slash}{namespace}{last}"
