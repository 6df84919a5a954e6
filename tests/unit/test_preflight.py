"""The operator's fail-fast messages, and the CLI's words for a cluster that is not up (no cluster needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx import cli
from phalanx.kube import preflight


def test_no_kubeconfig_at_all_says_how_to_get_one(tmp_path: Path) -> None:
    problem = preflight.kubeconfig_problem({}, tmp_path)
    assert problem is not None
    assert "KUBECONFIG is unset and ~/.kube/config does not exist" in problem
    assert "./task up" in problem


def test_a_kubeconfig_path_that_does_not_exist_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "gone.yaml"
    problem = preflight.kubeconfig_problem({"KUBECONFIG": str(missing)}, tmp_path)
    assert problem is not None and f"KUBECONFIG={missing} does not exist" in problem


def test_an_existing_kubeconfig_or_the_cluster_itself_is_fine(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("apiVersion: v1\nkind: Config\n")
    assert preflight.kubeconfig_problem({"KUBECONFIG": str(config)}, tmp_path) is None
    assert preflight.kubeconfig_problem({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, tmp_path) is None
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("")
    assert preflight.kubeconfig_problem({}, tmp_path) is None


def test_missing_crds_are_listed() -> None:
    assert preflight.missing_resources(["workloads", "workloads/status"]) == ["podgroups", "compositepodgroups"]
    assert preflight.missing_resources(["podgroups", "compositepodgroups", "workloads"]) == []


def test_run_without_a_kubeconfig_exits_at_once_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nowhere.yaml"))
    assert cli.main(["run", "--metrics-port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("phalanx run: KUBECONFIG=") and "does not exist" in err


@pytest.mark.parametrize("command", [["cluster", "kubeconfig"], ["cluster", "kubectl", "get", "pods"], ["cluster", "logs"]])
def test_cluster_commands_say_the_cluster_is_not_up(command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("PHALANX_CACHE", str(tmp_path))
    assert cli.main([*command, "--name", "nowhere"] if command[1] != "kubectl" else [*command[:2], "--name", "nowhere", *command[2:]]) == 1
    captured = capsys.readouterr()
    assert "cluster nowhere is not up: start it with `CLUSTER=nowhere ./task up`" in captured.err
    assert captured.out == "", "no path of a deleted cluster is printed"


@pytest.mark.parametrize(
    ("argv", "kubectl_args"),
    [
        (["cluster", "kubectl", "-n", "ml-team", "get", "pods"], ["-n", "ml-team", "get", "pods"]),
        (["cluster", "kubectl", "--", "-n", "ml-team", "get", "pods"], ["-n", "ml-team", "get", "pods"]),
        (["cluster", "kubectl", "--name", "x", "get", "pods", "-A"], ["get", "pods", "-A"]),
        (["cluster", "kubectl", "--name=x", "--", "get", "pods"], ["get", "pods"]),
    ],
)
def test_cluster_kubectl_needs_no_double_dash(argv: list[str], kubectl_args: list[str]) -> None:
    args = cli.parser().parse_args(cli.kubectl_passthrough(argv))
    rest = args.args[1:] if args.args[:1] == ["--"] else args.args
    assert rest == kubectl_args


def test_every_option_has_help_text() -> None:
    missing = []

    def walk(parser, path: str) -> None:
        for action in parser._actions:
            if action.help is None and action.dest != "help" and not action.choices:
                missing.append(f"{path} {action.dest}")
            if isinstance(action.choices, dict):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")

    walk(cli.parser(), "phalanx")
    assert missing == []


@pytest.mark.parametrize(
    ("env", "configured", "proxy"),
    [
        ({}, None, None),
        ({"HTTPS_PROXY": "http://proxy.example:3128"}, None, "http://proxy.example:3128"),
        ({"https_proxy": "http://proxy.example:3128", "NO_PROXY": "10.0.0.1"}, None, None),
        ({"HTTP_PROXY": "http://plain.example:3128"}, None, None),  # the server is https: only HTTPS_PROXY applies
        ({"HTTPS_PROXY": "http://proxy.example:3128"}, "http://kubeconfig.example:8080", "http://kubeconfig.example:8080"),
    ],
)
async def test_the_environment_is_read_once_for_the_api_server_and_never_per_request(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], configured: str | None, proxy: str | None
) -> None:
    from kubernetes_asyncio import client

    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    configuration = client.Configuration(host="https://10.0.0.1:6443")
    configuration.proxy = configured
    api = client.ApiClient(configuration)
    connector = api.rest_client.pool_manager.connector
    assert api.rest_client.pool_manager.trust_env, "the library's session reads the environment on every request"
    try:
        preflight.environment_read_once(api)
        session = api.rest_client.pool_manager
        assert not session.trust_env and not session.closed
        assert session.connector is connector, "the connection pool and its TLS context go on"
        assert api.rest_client.proxy == proxy
    finally:
        await api.close()
