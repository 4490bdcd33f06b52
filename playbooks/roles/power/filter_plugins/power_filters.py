"""Filters of the power role: thin shims over kiln.power (tested there, in tests/unit)."""

from ansible.errors import AnsibleFilterError

from kiln.errors import KilnError
from kiln.power import GpuPolicy, SensorLimits, check_readback, fan_plan, judge_sensors, read_states
from kiln.power import plan_commands as _plan_commands


def _states(text):
    try:
        return read_states(text)
    except (ValueError, KilnError) as error:
        raise AnsibleFilterError(f"cannot read nvidia-smi --query-gpu output: {error}") from error


def kiln_power_plan(text, policy, reapply_clocks=False):
    commands, refused = _plan_commands(
        _states(text), GpuPolicy.from_mapping(policy), reapply_clocks=bool(reapply_clocks)
    )
    return {"commands": commands, "refused": refused}


def kiln_power_check(text, policy, expected_gpus=None):
    return check_readback(_states(text), GpuPolicy.from_mapping(policy), expected_gpus)


def kiln_power_fan_plan(mc_info, fru, profile, current_output=None, last_applied=None):
    try:
        return fan_plan(mc_info, fru, profile, current_output, last_applied)
    except (ValueError, KilnError) as error:
        raise AnsibleFilterError(str(error)) from error


def kiln_power_judge_sdr(text, limits=None):
    try:
        return judge_sensors(text, SensorLimits.from_mapping(limits))
    except (ValueError, KilnError) as error:
        raise AnsibleFilterError(f"cannot read ipmitool sdr output: {error}") from error


class FilterModule:
    def filters(self):
        return {
            "kiln_power_plan": kiln_power_plan,
            "kiln_power_check": kiln_power_check,
            "kiln_power_fan_plan": kiln_power_fan_plan,
            "kiln_power_judge_sdr": kiln_power_judge_sdr,
        }
