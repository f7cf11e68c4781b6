"""``odsd replay`` and ``odsd store verify`` as the lead registers them."""

from __future__ import annotations

import json

import pytest
import typer
from PIL import Image
from typer.testing import CliRunner

from odsd.cli.replay import replay_cmd, verify_cmd
from odsd.errors import OdsdError


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    store_app = typer.Typer()
    app.command("replay")(replay_cmd)
    store_app.command("verify")(verify_cmd)
    app.add_typer(store_app, name="store")
    return app


def run(app, args):
    result = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=True)
    return result


def test_replay_json_and_gif(app, pick_place_store, tmp_path):
    out = tmp_path / "ep.gif"
    result = run(app, ["replay", pick_place_store, "-e", 0, "--mode", "dynamic", "--gif", out, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["mode"] == "dynamic" and data["not_reproduced"] == [] and data["max_obs_dev"] == 0.0
    assert data["gifs"] == [str(out)]
    with Image.open(out) as im:
        assert im.n_frames == data["episodes"][0]["length"]


def test_replay_table_several_episodes_in_rows(app, pick_place_store):
    result = run(app, ["replay", pick_place_store, "-e", 1, "-e", 2, "-e", 3, "--env-rows", 2])
    assert result.exit_code == 0, result.output
    assert "0 of 3 not reproduced" in result.output


def test_replay_errors_are_one_line_odsd_errors(app, pick_place_store, stateless_store):
    result = run(app, ["replay", pick_place_store, "-e", 0, "--task", "reach"])
    assert isinstance(result.exception, OdsdError) and result.exception.exit_code == 3
    result = run(app, ["replay", stateless_store, "-e", 0])
    assert isinstance(result.exception, OdsdError) and result.exception.exit_code == 2
    result = run(app, ["replay", pick_place_store, "-e", 0, "--mode", "physics"])
    assert isinstance(result.exception, OdsdError) and result.exception.exit_code == 2


def test_verify_exit_codes(app, pick_place_store, tmp_path):
    result = run(app, ["store", "verify", pick_place_store, "--replay", "--sample", 3, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["ok"] and len(data["sampled"]) == 3 and data["mode"] == "dynamic"
    result = run(app, ["store", "verify", pick_place_store])
    assert result.exit_code == 0 and "verify" in result.output


def test_verify_returns_4_when_episodes_do_not_reproduce(pick_place_store, tmp_path, capsys):
    import shutil

    copy = tmp_path / "changed"
    shutil.copytree(pick_place_store, copy)
    for run_file in (copy / "runs").glob("*/run.json"):
        info = json.loads(run_file.read_text())
        info["config"]["task_kwargs"]["max_speed"] = 0.25
        run_file.write_text(json.dumps(info))
    code = verify_cmd(
        copy, replay=True, sample=2, seed=0, env_rows=4, task=None, device="cpu", atol=1e-5, json_out=False
    )
    assert code == 4
    assert "not reproduced" in capsys.readouterr().out
