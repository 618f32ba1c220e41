"""The export contract of a go1-flat export (tests/data/go1_walker): the committed files are
what today's exporter writes, and a contract tampered consistently in policy.json and the
ONNX metadata is refused, naming the field: at load by the model.xml check
(checks.check_model) or, for what only the task's code knows, by sim2sim (check_task)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import mujoco
import numpy as np
import pytest
from contract_edit import edited_export

from trot.export.checks import ContractError, check_model
from trot.export.contract import build_contract
from trot.export.onnx import OPSET, ExportError, check_written_model
from trot.export.runner import OnnxPolicy
from trot.export.schema import Contract
from trot.export.sim2sim import PlainRunner
from trot.sim import make_sim
from trot.tasks.env import Env
from trot.tasks.registry import compile_model, get_task, make_env
from trot.tasks.velocity import Locomotion

WALKER = Path(__file__).parent / "data" / "go1_walker"
REMAKE = "regenerate it: bash tests/data/make_go1_walker.sh"


@pytest.fixture(scope="module")
def policy() -> OnnxPolicy:
    return OnnxPolicy(WALKER)


def _model_fields_that_differ(a: mujoco.MjModel, b: mujoco.MjModel) -> list[str]:
    """The MjModel arrays that differ (1e-9 relative): the model, not its xml formatting."""
    out = []
    for name in dir(a):
        x = getattr(a, name) if not name.startswith("_") else None
        if isinstance(x, np.ndarray) and x.dtype.kind in "fiu":
            y = getattr(b, name)
            if x.shape != y.shape or not np.allclose(x, y, rtol=1e-9, atol=0):
                out.append(name)
    return out


def test_committed_walker_is_what_the_exporter_writes_today(policy):
    """The committed contract and model.xml are what today's code exports for go1-flat
    (the weights aside): a change of the Go1 or of the exporter shows up here, not as a
    parity failure further down. The fresh contract passes the load check too."""
    c = policy.contract
    env = _walker_env(c)
    fresh_model = mujoco.MjModel.from_xml_string(env.task.build().to_xml())
    changed = _model_fields_that_differ(fresh_model, policy.model)
    assert not changed, f"go1-flat's model changed ({changed}); {REMAKE}"
    fresh = build_contract(env, env.task.config, c.training_env_steps, OPSET,
                           c.model_xml_sha256, {})
    changed = sorted(f.name for f in dataclasses.fields(Contract)
                     if f.name != "trot_version" and getattr(fresh, f.name) != getattr(c, f.name))
    assert not changed, f"the exporter now writes other {changed}; {REMAKE}"
    check_model(fresh, policy.model)
    assert any(abs(x) > 0.5 for x in c.action_offset)  # the home pose, not zeros
    assert c.home_keyframe == "home"


def _walker_env(c: Contract) -> Env:
    """One env of the walker's task and config."""
    return make_env(c.task, 1, config=type(get_task(c.task).config).from_dict(c.task_config))


def test_policy_json_is_the_schema_both_ways(policy, tmp_path):
    """policy.json <-> Contract: the committed walker's JSON parses and re-serializes to the
    same bytes, the exporter's Contract is what its own JSON parses to (and, the version
    aside, the committed file's bytes), and a key missing or unknown, at the top or nested,
    is refused naming it and the keys accepted, also at the runner's load. The bugs: a key
    renamed, dropped or flattened on the way out (a robot reading today's files breaks), a
    missing key filled from the dataclass's default (action_clip, contract_version), an
    unknown one (a typo, a newer format) ignored instead of refused."""
    text = (WALKER / "policy.json").read_text()
    c = Contract.from_json(json.loads(text))
    assert c == policy.contract and c.dumps() == text
    assert Contract.from_json(c.to_json()) == c and c.to_json() == json.loads(text)
    env = _walker_env(c)
    fresh = build_contract(env, env.task.config, c.training_env_steps, OPSET,
                           c.model_xml_sha256, {})
    assert Contract.from_json(json.loads(fresh.dumps())) == fresh
    assert dataclasses.replace(fresh, trot_version=c.trot_version).dumps() == text
    refused = {  # the edit -> what the error names: the key, then the keys accepted
        "policy.json is missing 'action_clip'; Contract": lambda d: d.pop("action_clip"),
        "policy.json has unknown 'obs_dims'; Contract": lambda d: d.update(obs_dims=47),
        "policy.json obs_history is missing 'fill'; ObsHistory":
            lambda d: d["obs_history"].pop("fill"),
        "policy.json actions[2] has unknown 'kpp'; Actuator":
            lambda d: d["actions"][2].update(kpp=35.0),
        "policy.json observation[1] is missing 'scale'; ObservationTerm":
            lambda d: d["observation"][1].pop("scale"),
    }
    for message, edit in refused.items():
        d = json.loads(text)
        edit(d)
        with pytest.raises(ContractError, match=re.escape(message) +
                           r" \(contract_version 4\) has \w+, \w+"):  # the list
            Contract.from_json(d)
    export = _tampered(tmp_path / "unknown", lambda d: d.update(obs_dims=47))
    with pytest.raises(ContractError, match="policy.json has unknown 'obs_dims'"):
        OnnxPolicy(export)


class FineGo1(Locomotion):
    """go1-flat with numbers of more digits than model.xml keeps (MuJoCo's XML writer
    rounds to 6 significant ones): a gain, a control range and the home pose, as a user's
    robot or a range in degrees converted to radians has them."""

    def build(self) -> mujoco.MjSpec:
        spec = super().build()
        a = spec.actuators[0]
        a.gainprm[0], a.biasprm[1] = 35.123456789, -35.123456789
        a.ctrlrange = [-0.86312345678, 0.86312345678]
        spec.keys[0].qpos[8] = 0.912345678
        return spec


def test_numbers_beyond_the_xmls_digits_pass_the_export_check():
    """The contract is built from the training model, model.xml is its 6-digit round trip:
    the export's own load check must take one for the other (it refused them), and still
    refuse a number off by far more than the rounding."""
    cfg = get_task("go1-flat").config
    task = FineGo1(get_task("go1-flat").task_cls, cfg)
    env = Env("go1-flat", task, make_sim("cpu", compile_model(task), 1, cfg.substeps, "cpu"), 0)
    spec = task.build()
    xml = spec.to_xml()
    assert "35.1235" in xml and "35.123456789" not in xml  # the writer's rounding, today
    contract = build_contract(env, cfg, 0, OPSET, "", {})
    check_written_model(contract, xml, {})
    kp = dataclasses.replace(contract.actions[0], kp=35.13)  # 2e-4 relative: another gain
    contract = dataclasses.replace(contract, actions=(kp, *contract.actions[1:]))
    with pytest.raises(ExportError, match=re.escape("actions[0].kp")):
        check_written_model(contract, xml, {})


def _tampered(d: Path, edit) -> Path:
    """The walker re-exported with `edit(contract)` (contract_edit.edited_export)."""
    return edited_export(WALKER, d, edit)


def _swap(c: dict, field: str, i: int, j: int, key: str | None = None) -> None:
    x = c[field]
    if key is None:
        x[i], x[j] = x[j], x[i]
    else:
        x[i][key], x[j][key] = x[j][key], x[i][key]


def _relabel(c: dict) -> None:
    """FR_thigh and FR_calf swapped consistently: actuators, offsets and home pose."""
    for field in ("actions", "action_offset", "default_joint_pos"):
        _swap(c, field, 1, 2)


def _set(field: str, i: int, value, key: str | None = None):
    def edit(c: dict) -> None:
        if key is None:
            c[field][i] = value
        else:
            c[field][i][key] = value
    return edit


RUNNER_REFUSES = {  # refused at OnnxPolicy load, by the model.xml check; key: the message
    "actions[1].joint": lambda c: _swap(c, "actions", 1, 2, "joint"),
    "actions[1].name": _relabel,
    "action_offset[1]": _set("action_offset", 1, 0.8),
    "default_joint_pos[2]": _set("default_joint_pos", 2, -1.7),
    "actions[0].kp": _set("actions", 0, 40.0, "kp"),
    "actions[3].ctrl_range": _set("actions", 3, [-1.0, 1.0], "ctrl_range"),
    "home_keyframe": lambda c: c.update(home_keyframe="crouch"),
    "contract_version": lambda c: c.update(contract_version=99),
    "observation[2]": lambda c: c["observation"][2]["source"]["sensors"].__setitem__(
        0, "FR_hip_angle"),
    "observation[1]": lambda c: c["observation"][1].update(start=4),
    "observation[5] ('command') reads 'param'":
        lambda c: c["observation"][5]["source"].update(kind="param"),
    "observation[0] ('projected_gravity') has size 3 but its source gives 6":
        lambda c: c["observation"][0]["source"].update(sensors=["gyro"] * 2),
    "observation[5] ('command') has size 3 but its source gives 4":
        lambda c: c.update(command_dim=4),
    "observation[5] ('command') has size 3 but its source gives 2":
        lambda c: c["observation"][5].update(source={"kind": "qpos", "start": 7, "stop": 9}),
    "observation[5] ('command') has size 3 but its source gives 9":
        lambda c: c["observation"][5]["source"].update(kind="height_scan", grid=[1, 1, 0.5]),
    "observation[5] ('command'): scan grid (lx, ly, spacing) needs":
        lambda c: c["observation"][5]["source"].update(kind="height_scan"),
    "action_scale": lambda c: c["action_scale"].pop(),
    "obs_history.order": lambda c: c["obs_history"].update(order="newest_first"),
    "obs_history.fill": lambda c: c["obs_history"].update(fill="zeros"),
    "obs_history.input_dim": lambda c: c["obs_history"].update(input_dim=47),
    "physics_dt": lambda c: c.update(physics_dt=0.002),
    "control_dt": lambda c: c.update(substeps=10),
}
TASK_REFUSES = {  # consistent with model.xml; refused by sim2sim, from the task's code
    "action_scale": _set("action_scale", 0, 0.25),
    "observation[2].offset": lambda c: c["observation"][2]["offset"].__setitem__(1, 0.8),
    "observation[2].source": lambda c: _swap(c["observation"][2]["source"], "sensors",
                                                1, 2),
    "observation[3].scale": _set("observation", 3, 0.1, "scale"),
}


@pytest.mark.parametrize("field", RUNNER_REFUSES)
def test_tampered_contract_is_refused_at_load_naming_the_field(tmp_path, field):
    d = _tampered(tmp_path / "export", RUNNER_REFUSES[field])
    with pytest.raises(ContractError, match=re.escape(f"policy.json {field}")):
        OnnxPolicy(d)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_contract_versions_before_0_1_are_refused(tmp_path, version):
    """Contract versions 1 to 3 were never released: refused, naming the version, the one
    read and the fix. The bug: reading one with defaults (a history length of 1, no state,
    no latency, no model_files to check), so a robot runs the policy without the memory or
    the terrain files it was trained with."""
    d = _tampered(tmp_path / "export", lambda c: c.update(contract_version=version))
    with pytest.raises(ContractError, match=rf"contract_version {version} was written by a "
                                            r"trot before 0\.1.*reads 4 only.*trot export"):
        OnnxPolicy(d)


@pytest.mark.parametrize("field", TASK_REFUSES)
def test_contract_the_task_contradicts_is_refused_by_sim2sim(tmp_path, field):
    d = _tampered(tmp_path / "export", TASK_REFUSES[field])
    OnnxPolicy(d)  # the model has no say on these
    with pytest.raises(ContractError, match=re.escape(f"policy.json {field}")):
        PlainRunner(d)


def test_untampered_rewrite_loads(tmp_path):
    d = _tampered(tmp_path / "export", lambda c: None)  # the rewrite itself is harmless
    assert OnnxPolicy(d).contract == OnnxPolicy(WALKER).contract
    PlainRunner(d)


def test_sim2sim_applies_the_contracts_action_latency(tmp_path):
    """With action_latency_steps L in the contract, plain MuJoCo receives each action L
    control steps late (zero actions before the first), as the training env's motors did;
    with L = 0 at once. The contract's L is the task's latency_steps. The bugs: sim2sim
    ignoring the latency (the contract 3 behaviour), an off-by-one in the queue, the
    queue not refilled at an episode's start."""
    import torch

    env = make_env("go1-flat", 1, config=dataclasses.replace(get_task("go1-flat").config,
                                                             latency_steps=2))
    assert build_contract(env, env.task.config, 0, OPSET, "", {}).action_latency_steps == 2
    for latency in (0, 2):
        d = _tampered(tmp_path / f"latency{latency}",
                      lambda c, n=latency: c.update(action_latency_steps=n))
        r = PlainRunner(d)
        gen = torch.Generator().manual_seed(0)
        for _ in range(2):  # two episodes: the second starts with a fresh queue
            qpos, qvel = r.task.initial_state(r.sim, gen)
            r.start(qpos[0].double().numpy(), qvel[0].double().numpy(), gen)
            actions = []
            for k in range(5):
                actions.append(r.step(gen))
                sent = actions[k - latency] if k >= latency else np.zeros(12)
                np.testing.assert_allclose(r.data.ctrl, r.policy.ctrl(sent), atol=1e-12)


def test_ctrl_is_what_mujoco_applies():
    """policy.ctrl gives the commands MuJoCo applied in training: clamped to each
    actuator's ctrl_range as mj_step clamps them (checked on MuJoCo's actuator forces),
    here with actions pushed past the range by a doubled action scale."""
    policy = OnnxPolicy(WALKER)  # its own: the module's stays as exported
    m, d = policy.model, mujoco.MjData(policy.model)
    policy.scale = 2.0 * policy.scale  # a robot whose targets can leave the range
    a = np.where(np.arange(m.nu) % 2 == 0, 1.0, -1.0)
    raw = policy.offset + policy.scale * a
    assert m.actuator_ctrllimited.all()
    assert ((raw < m.actuator_ctrlrange[:, 0]) | (raw > m.actuator_ctrlrange[:, 1])).any()
    forces = []
    for ctrl in (raw, policy.ctrl(a)):
        mujoco.mj_resetDataKeyframe(m, d, 0)
        d.ctrl[:] = ctrl
        mujoco.mj_forward(m, d)
        forces.append(d.actuator_force.copy())
    np.testing.assert_array_equal(forces[1], forces[0])
    assert (policy.ctrl(a) >= m.actuator_ctrlrange[:, 0]).all()
    assert (policy.ctrl(a) <= m.actuator_ctrlrange[:, 1]).all()


def test_actuators_that_drive_no_joint_are_refused():
    """The contract maps each actuator to a joint by its transmission id: a tendon's id
    read as a joint's would name the wrong joint without a word."""
    from trot.export.model_info import actuators

    m = mujoco.MjModel.from_xml_string("""<mujoco><worldbody><body><joint name="j"/>
      <geom size="0.1"/></body></worldbody><tendon><fixed name="t"><joint joint="j"
      coef="1"/></fixed></tendon><actuator><motor tendon="t"/></actuator></mujoco>""")
    with pytest.raises(ValueError, match="drives a mjTRN_TENDON: the export maps"):
        actuators(m)
