"""The request flow (drtp/registry/flow.py) driven step by step, without a network: the decisions both engines
share — retries, challenges, renewal, redirects — and their tally, each seen in the steps it yields.

The registry's answers are scripted; the credentials are a real Authenticator (basic: answering its challenge
needs no token server).  The engines driving the flow on real registries are tested in test_token_scopes.py,
test_realreg_auth.py, test_faults_e2e.py and test_fast_engine.py.
"""

from __future__ import annotations

import base64

from drtp.registry.auth import Authenticator
from drtp.registry.flow import Call, Send, request_flow
from drtp.registry.transport import RequestError, Response
from drtp.replay.messages import RegistryAuth
from drtp.replay.outcome import RESET, TRUNCATED

REGISTRY = ("http", "registry:5000")
STORAGE = ("http", "storage:9000")
MANIFEST = "/v2/library/alpine/manifests/latest"


class Secret:
    """A renewed secret as the master's source hands it over."""

    def __init__(self, username: str, password: str, generation: int) -> None:
        self.username, self.password, self.generation = username, password, generation


def basic(username: str, password: str) -> str:
    """The Authorization value of basic credentials (RFC 7617)."""
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def drive(flow, answers: list, before_call=None) -> tuple[Response, list]:
    """Run ``flow``: each Send gets the next scripted answer, each Call runs in place (as the blocking
    session runs it); the final answer and every step taken."""
    steps: list = []
    answers = iter(answers)
    try:
        step = next(flow)
        while True:
            steps.append(step)
            if isinstance(step, Send):
                step = flow.send(next(answers))
                continue
            if before_call is not None:
                before_call(step)
            step = flow.send(step.run())
    except StopIteration as done:
        return done.value, steps


def flow_of(method: str = "GET", auths: dict | None = None, retries: int = 0, target: str = MANIFEST):
    return request_flow(method, REGISTRY, target, {"Accept": "x"}, auths or {}, retries, 1.0)


def basic_auth(renewable: bool = False) -> Authenticator:
    return Authenticator(RegistryAuth("http://registry:5000", "user", "one", renewable=renewable))


def sends(steps: list) -> list[Send]:
    return [s for s in steps if isinstance(s, Send)]


def test_a_read_that_got_no_answer_is_sent_again_on_the_same_send_while_retries_allow():
    r, steps = drive(flow_of(retries=1), [RequestError(RESET, "no answer"), Response(200)])
    assert (r.status, r.attempts, r.challenges) == (200, 2, 0)
    assert len(steps) == 2 and steps[0] is steps[1]  # the same Send: an engine keeps its connection for it


def test_a_send_is_not_repeated_once_an_answer_began_or_for_a_write():
    r, steps = drive(flow_of(retries=3), [RequestError(TRUNCATED, "cut", answered=True)])
    assert (r.status, r.outcome, r.error, r.attempts) == (0, TRUNCATED, "cut", 1)
    r, steps = drive(flow_of("PUT", retries=3), [RequestError(RESET, "no answer")])
    assert (r.status, r.outcome, r.attempts, len(steps)) == (0, RESET, 1, 1)


def test_a_basic_challenge_is_answered_once_and_tallied_as_a_challenge():
    auth = basic_auth()
    r, steps = drive(
        flow_of(auths={REGISTRY: auth}), [Response(401, {"www-authenticate": 'Basic realm="r"'}), Response(200)]
    )
    assert (r.status, r.attempts, r.challenges) == (200, 1, 1)
    first, call, again = steps
    assert "Authorization" not in first.headers and isinstance(call, Call) and call.challenge
    assert again.headers == {"Accept": "x", "Authorization": basic("user", "one")}
    # the next request carries the credentials from its first send
    r, steps = drive(flow_of(auths={REGISTRY: auth}), [Response(200)])
    assert (r.attempts, r.challenges, steps[0].headers["Authorization"]) == (1, 0, basic("user", "one"))


def test_a_redirect_of_a_read_goes_to_its_target_without_credentials_and_every_hop_is_tallied():
    auth = basic_auth()
    drive(flow_of(auths={REGISTRY: auth}), [Response(401, {"www-authenticate": "Basic"}), Response(200)])
    moved = Response(307, {"location": "http://storage:9000/blob?sig=1"})
    r, steps = drive(flow_of(auths={REGISTRY: auth}, retries=1), [moved, RequestError(RESET, "x"), Response(200)])
    assert (r.status, r.attempts, r.challenges) == (200, 3, 0)
    hop = sends(steps)[-1]
    assert (hop.server, hop.target, hop.headers) == (STORAGE, "/blob?sig=1", {"Accept": "x"})


def test_a_redirect_of_a_write_is_its_answer_and_redirects_stop_after_three():
    moved = Response(302, {"location": "/elsewhere"})
    r, steps = drive(flow_of("POST"), [moved])
    assert (r.status, len(steps)) == (302, 1)
    r, steps = drive(flow_of(), [Response(302, {"location": "/again"}) for _ in range(4)])
    assert (r.status, r.attempts, len(steps)) == (302, 4, 4)


def test_a_refused_secret_is_renewed_once_for_a_read_and_never_for_a_write():
    auth = basic_auth(renewable=True)
    challenge = Response(401, {"www-authenticate": "Basic"})
    drive(flow_of(auths={REGISTRY: auth}), [challenge, Response(200)])  # the secret worked: proven

    def renewed_meanwhile(call: Call) -> None:
        if not call.challenge:  # the wait for a renewed secret: the master's update came
            auth.replace_secret(Secret("user", "two", 1))

    r, steps = drive(
        flow_of(auths={REGISTRY: auth}),
        [Response(401, {"www-authenticate": "Basic"}), Response(200)],
        renewed_meanwhile,
    )
    assert (r.status, r.attempts, r.challenges) == (200, 2, 0)
    assert sends(steps)[-1].headers["Authorization"] == basic("user", "two")
    assert auth.take_refusals() == [0]  # the node reports the refusal of generation 0

    write = drive(flow_of("PUT", auths={REGISTRY: auth}), [Response(401, {"www-authenticate": "Basic"})])[0]
    assert write.status == 401 and write.error.endswith("the write was not sent again")


def test_a_challenge_the_credentials_cannot_answer_is_the_answer_with_the_refusal_as_its_error():
    server = ("https", "registry:5000")
    auth = Authenticator(RegistryAuth("https://registry:5000", "user", "one"))
    flow = request_flow("GET", server, MANIFEST, None, {server: auth}, 0, 1.0)
    bearer = Response(401, {"www-authenticate": 'Bearer realm="http://token:8080/auth",service="registry"'})
    r, steps = drive(flow, [bearer])
    assert (r.status, r.attempts, r.challenges, len(steps)) == (401, 1, 0, 2)
    assert r.error == "token server token:8080 is plain http: the credentials of https://registry:5000 as user stay"
