"""Talking to a container registry: the one home of the Distribution protocol.

Repository names and references (:mod:`.names`), credentials and TLS trust
(:mod:`.auth`), the HTTP/1.1 connections that carry replayed requests
(:mod:`.transport`), the named calls every other registry request goes
through (:mod:`.client`), the session a run spec asks for (:mod:`.spec_session`),
image manifests and generated layer content (:mod:`.manifest`, :mod:`.content`),
and a real registry started on loopback for tests and the demo (:mod:`.local`).
Its modules sit in two layers (docs/architecture.md): the grammars (:mod:`.names`,
:mod:`.name_maps`) below the config, the rest above it, so this file imports nothing.
"""
