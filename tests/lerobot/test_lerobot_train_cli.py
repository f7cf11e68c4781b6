"""An export trains with LeRobot's own ``lerobot-train`` command, and its checkpoint acts."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from odsd.lerobot import export_lerobot

pytest.importorskip("lerobot.datasets.lerobot_dataset")
pytestmark = [pytest.mark.lerobot, pytest.mark.slow]

from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402

STEPS = 30


def lerobot_train() -> str:
    path = shutil.which("lerobot-train", path=str(Path(sys.executable).parent))
    if path is None:
        pytest.fail("lerobot-train is not installed beside this interpreter (the lerobot extra installs it)")
    return path


def test_lerobot_train_cli_trains_an_export(collected_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    export_lerobot(collected_store, out, repo_id="odsd/pick_place", durable=False)
    run_dir = tmp_path / "train"
    argv = [
        lerobot_train(),
        "--dataset.repo_id=odsd/pick_place",
        f"--dataset.root={out}",
        "--policy.type=act",
        "--policy.device=cpu",
        "--policy.push_to_hub=false",
        "--policy.pretrained_backbone_weights=null",
        "--policy.dim_model=32",
        "--policy.n_heads=2",
        "--policy.dim_feedforward=64",
        "--policy.n_encoder_layers=1",
        "--policy.n_decoder_layers=1",
        "--policy.chunk_size=8",
        "--policy.n_action_steps=8",
        f"--steps={STEPS}",
        "--batch_size=16",
        "--num_workers=0",
        f"--save_freq={STEPS}",
        "--log_freq=10",
        "--wandb.enable=false",
        f"--output_dir={run_dir}",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    losses = [float(x) for x in re.findall(r"\bloss:([0-9.]+)", res.stdout + res.stderr)]
    assert losses and all(torch.isfinite(torch.tensor(losses))), res.stdout[-2000:]

    pretrained = run_dir / "checkpoints" / f"{STEPS:06d}" / "pretrained_model"
    assert (pretrained / "model.safetensors").is_file() and (pretrained / "config.json").is_file()
    from lerobot.policies.act.modeling_act import ACTPolicy

    policy = ACTPolicy.from_pretrained(pretrained)
    policy.eval()
    item = LeRobotDataset("odsd/pick_place", root=out)[0]
    batch = {k: v.unsqueeze(0) for k, v in item.items() if k.startswith("observation.")}
    from lerobot.policies.factory import make_pre_post_processors

    pre, post = make_pre_post_processors(policy.config, pretrained_path=str(pretrained))
    with torch.no_grad():
        action = post(policy.select_action(pre(batch)))
    assert action.shape == (1, item["action"].shape[0]) and torch.isfinite(action).all()
