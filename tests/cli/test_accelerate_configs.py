"""Each GPU accelerate config is parsed and turned into a launch environment exactly as `accelerate launch` does.

No process is started (there is no GPU here); cpu_2proc.yaml is exercised for real by the trainer tests.
"""

from pathlib import Path

import pytest
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env, prepare_simple_launcher_cmd_env

CONFIGS = Path(__file__).parents[2] / "accelerate_configs"
EXPECTED = {
    "single_gpu.yaml": {},
    "multi_gpu.yaml": {},
    "deepspeed_zero2.yaml": {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"},
    "deepspeed_zero3.yaml": {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"},
    "fsdp.yaml": {
        "ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP"
    },
}


def launch_env(config: Path) -> dict[str, str]:
    """The environment `accelerate launch --config_file config -m divrl.train` would give its processes."""
    args = launch_command_parser().parse_args(["--config_file", str(config), "-m", "divrl.train", "--config", "r.yaml"])
    args, defaults, _ = _validate_launch_command(args)
    if args.use_deepspeed:
        args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)
        return prepare_deepspeed_cmd_env(args)[1]
    if args.use_fsdp or args.multi_gpu:
        return prepare_multi_gpu_env(args)
    return prepare_simple_launcher_cmd_env(args)[1]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_gpu_config_produces_launch_environment(name):
    env = launch_env(CONFIGS / name)
    assert env["ACCELERATE_MIXED_PRECISION"] == "bf16"
    assert env.get("ACCELERATE_USE_CPU", "false").lower() == "false"
    for key, value in EXPECTED[name].items():
        assert env.get(key) == value, key


def test_every_shipped_config_is_covered():
    assert {p.name for p in CONFIGS.glob("*.yaml")} == set(EXPECTED) | {"cpu_2proc.yaml"}
