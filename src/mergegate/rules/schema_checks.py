"""JSON Schema checks of job and policy files, compiled ahead of time: GENERATED, do not edit.

Written by `python scripts/schema_checks.py` (fastjsonschema 2.22.3's compile_to_code, with the
changes that script's doc lists) from src/mergegate/schemas/job.schema.json and
policy.schema.json; tests/rules/test_schema_checks.py fails when a schema changed and this module
was not written again. rules/config.py calls check_job and check_policy: None for a document the
schema accepts, JsonSchemaValueException for one it refuses (jsonschema then says why).
"""

# mypy: ignore-errors
# (Generated code: ruff leaves it out (pyproject.toml), and so does the 600-line limit.)

import re

FASTJSONSCHEMA_VERSION = "2.22.3"
SCHEMA_SHA256 = {
    "job": "1a4d111a94c09a225fc369c81fe503d968b0a35159111d307ab17e07be2b24dc",
    "policy": "90e6c292ac2be3131abae58b7c82a4a01b7b81744ddf68a91bcba6b68c7048e7",
}


class JsonSchemaValueException(ValueError):
    """The schema refuses the document (raised bare: jsonschema words the error)."""


# fastjsonschema's exception for collected errors: never raised here (the checks stop at the
# first), only named where a subschema's failure is caught.
JsonSchemaValuesException = JsonSchemaValueException


class Decimal:
    """Stands in for decimal.Decimal, which the checks only test a value against: YAML (and JSON
    as mergegate reads it) gives no Decimal, so no value is one, as before."""


NoneType = type(None)

# job.schema.json

JOB_PATTERNS = {
    '^[a-z0-9][a-z0-9._-]{0,127}$': re.compile('^[a-z0-9][a-z0-9._-]{0,127}\\Z'),
    '^[A-Za-z_][A-Za-z0-9_]{0,127}$': re.compile('^[A-Za-z_][A-Za-z0-9_]{0,127}\\Z'),
    '^[A-Za-z0-9][A-Za-z0-9._/-]{0,63}$': re.compile('^[A-Za-z0-9][A-Za-z0-9._/-]{0,63}\\Z'),
    '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$': re.compile('^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\\Z')
}


def validate_https___mergegate_dev_schemas_job_schema_json(data, custom_formats={}, name_prefix=None):
    if not isinstance(data, (dict)):
        raise JsonSchemaValueException
    data_is_dict = isinstance(data, dict)
    if data_is_dict:
        data__missing_keys = set(['id', 'command']) - data.keys()
        if data__missing_keys:
            raise JsonSchemaValueException
        data_keys = set(data.keys())
        if "id" in data_keys:
            data_keys.remove("id")
            data__id = data["id"]
            if not isinstance(data__id, (str)):
                raise JsonSchemaValueException
            if isinstance(data__id, str):
                if not JOB_PATTERNS['^[a-z0-9][a-z0-9._-]{0,127}$'].search(data__id):
                    raise JsonSchemaValueException
        if "description" in data_keys:
            data_keys.remove("description")
            data__description = data["description"]
            if not isinstance(data__description, (str)):
                raise JsonSchemaValueException
            if isinstance(data__description, str):
                data__description_len = len(data__description)
                if data__description_len > 4096:
                    raise JsonSchemaValueException
        if "command" in data_keys:
            data_keys.remove("command")
            data__command = data["command"]
            if not isinstance(data__command, (list, tuple)):
                raise JsonSchemaValueException
            data__command_is_list = isinstance(data__command, (list, tuple))
            if data__command_is_list:
                data__command_len = len(data__command)
                if data__command_len < 1:
                    raise JsonSchemaValueException
                if data__command_len > 1024:
                    raise JsonSchemaValueException
                for data__command_x, data__command_item in enumerate(data__command):
                    if not isinstance(data__command_item, (str)):
                        raise JsonSchemaValueException
                    if isinstance(data__command_item, str):
                        data__command_item_len = len(data__command_item)
                        if data__command_item_len > 65536:
                            raise JsonSchemaValueException
        if "timeout_seconds" in data_keys:
            data_keys.remove("timeout_seconds")
            data__timeoutseconds = data["timeout_seconds"]
            if not isinstance(data__timeoutseconds, (int)) and not (isinstance(data__timeoutseconds, float) and data__timeoutseconds.is_integer()) or isinstance(data__timeoutseconds, bool):
                raise JsonSchemaValueException
            if isinstance(data__timeoutseconds, (int, float, Decimal)) and not isinstance(data__timeoutseconds, bool):
                if data__timeoutseconds < 1:
                    raise JsonSchemaValueException
        if "cwd" in data_keys:
            data_keys.remove("cwd")
            data__cwd = data["cwd"]
            if not isinstance(data__cwd, (str)):
                raise JsonSchemaValueException
            if isinstance(data__cwd, str):
                data__cwd_len = len(data__cwd)
                if data__cwd_len < 1:
                    raise JsonSchemaValueException
                if data__cwd_len > 4096:
                    raise JsonSchemaValueException
        if "env" in data_keys:
            data_keys.remove("env")
            data__env = data["env"]
            if not isinstance(data__env, (dict)):
                raise JsonSchemaValueException
            data__env_is_dict = isinstance(data__env, dict)
            if data__env_is_dict:
                data__env_len = len(data__env)
                if data__env_len > 256:
                    raise JsonSchemaValueException
                data__env_keys = set(data__env.keys())
                for data__env_key in data__env_keys:
                    if data__env_key not in []:
                        data__env_value = data__env.get(data__env_key)
                        if not isinstance(data__env_value, (str)):
                            raise JsonSchemaValueException
                        if isinstance(data__env_value, str):
                            data__env_value_len = len(data__env_value)
                            if data__env_value_len > 65536:
                                raise JsonSchemaValueException
                if data__env_len != 0:
                    data__env_property_names = True
                    for data__env_key in data__env:
                        try:
                            if isinstance(data__env_key, str):
                                if not JOB_PATTERNS['^[A-Za-z_][A-Za-z0-9_]{0,127}$'].search(data__env_key):
                                    raise JsonSchemaValueException
                        except (JsonSchemaValueException, JsonSchemaValuesException):
                            data__env_property_names = False
                    if not data__env_property_names:
                        raise JsonSchemaValueException
        if "labels" in data_keys:
            data_keys.remove("labels")
            data__labels = data["labels"]
            if not isinstance(data__labels, (list, tuple)):
                raise JsonSchemaValueException
            data__labels_is_list = isinstance(data__labels, (list, tuple))
            if data__labels_is_list:
                data__labels_len = len(data__labels)
                if data__labels_len > 64:
                    raise JsonSchemaValueException
                def fn(var): return frozenset(dict((k, fn(v)) for k, v in var.items()).items()) if hasattr(var, "items") else tuple(fn(v) for v in var) if isinstance(var, (dict, list)) else (bool, var) if isinstance(var, bool) else var
                if data__labels_len > len(set(fn(data__labels_x) for data__labels_x in data__labels)):
                    raise JsonSchemaValueException
                for data__labels_x, data__labels_item in enumerate(data__labels):
                    if not isinstance(data__labels_item, (str)):
                        raise JsonSchemaValueException
                    if isinstance(data__labels_item, str):
                        if not JOB_PATTERNS['^[A-Za-z0-9][A-Za-z0-9._/-]{0,63}$'].search(data__labels_item):
                            raise JsonSchemaValueException
        if "runs_on" in data_keys:
            data_keys.remove("runs_on")
            data__runson = data["runs_on"]
            if not isinstance(data__runson, (list, tuple)):
                raise JsonSchemaValueException
            data__runson_is_list = isinstance(data__runson, (list, tuple))
            if data__runson_is_list:
                data__runson_len = len(data__runson)
                if data__runson_len < 1:
                    raise JsonSchemaValueException
                if data__runson_len > 16:
                    raise JsonSchemaValueException
                def fn(var): return frozenset(dict((k, fn(v)) for k, v in var.items()).items()) if hasattr(var, "items") else tuple(fn(v) for v in var) if isinstance(var, (dict, list)) else (bool, var) if isinstance(var, bool) else var
                if data__runson_len > len(set(fn(data__runson_x) for data__runson_x in data__runson)):
                    raise JsonSchemaValueException
                for data__runson_x, data__runson_item in enumerate(data__runson):
                    if not isinstance(data__runson_item, (str)):
                        raise JsonSchemaValueException
                    if isinstance(data__runson_item, str):
                        if not JOB_PATTERNS['^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'].search(data__runson_item):
                            raise JsonSchemaValueException
        if "retries" in data_keys:
            data_keys.remove("retries")
            data__retries = data["retries"]
            if not isinstance(data__retries, (int)) and not (isinstance(data__retries, float) and data__retries.is_integer()) or isinstance(data__retries, bool):
                raise JsonSchemaValueException
            if isinstance(data__retries, (int, float, Decimal)) and not isinstance(data__retries, bool):
                if data__retries < 0:
                    raise JsonSchemaValueException
                if data__retries > 100:
                    raise JsonSchemaValueException
        if "idempotent" in data_keys:
            data_keys.remove("idempotent")
            data__idempotent = data["idempotent"]
            if not isinstance(data__idempotent, (bool)):
                raise JsonSchemaValueException
        if data_keys:
            raise JsonSchemaValueException
    return data

# policy.schema.json

POLICY_PATTERNS = {
    '^[A-Za-z_][A-Za-z0-9_]*$': re.compile('^[A-Za-z_][A-Za-z0-9_]*\\Z'),
    '^[A-Za-z_][A-Za-z0-9_*]*$': re.compile('^[A-Za-z_][A-Za-z0-9_*]*\\Z'),
    '^[0-9]{1,9}[smhd]$': re.compile('^[0-9]{1,9}[smhd]\\Z'),
    "^[^\\W_][\\w .'@-]{0,127}$": re.compile("^[^\\W_][\\w .'@-]{0,127}\\Z"),
    '^keys/[A-Za-z0-9._/-]+$': re.compile('^keys/[A-Za-z0-9._/-]+\\Z'),
    '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$': re.compile('^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})\\Z')
}


def validate_https___mergegate_dev_schemas_policy_schema_json(data, custom_formats={}, name_prefix=None):
    if not isinstance(data, (dict)):
        raise JsonSchemaValueException
    data_is_dict = isinstance(data, dict)
    if data_is_dict:
        data__missing_keys = set(['version']) - data.keys()
        if data__missing_keys:
            raise JsonSchemaValueException
        data_keys = set(data.keys())
        if "version" in data_keys:
            data_keys.remove("version")
            data__version = data["version"]
            if not (isinstance(data__version, (int, float)) and not isinstance(data__version, bool) and data__version == 1):
                raise JsonSchemaValueException
        if "approvers" in data_keys:
            data_keys.remove("approvers")
            data__approvers = data["approvers"]
            if not isinstance(data__approvers, (list, tuple)):
                raise JsonSchemaValueException
            data__approvers_is_list = isinstance(data__approvers, (list, tuple))
            if data__approvers_is_list:
                data__approvers_len = len(data__approvers)
                for data__approvers_x, data__approvers_item in enumerate(data__approvers):
                    validate_https___mergegate_dev_schemas_policy_schema_json___defs_person(data__approvers_item, custom_formats, (name_prefix or "data") + ".approvers[{data__approvers_x}]".format(**locals()))
        if "proposers" in data_keys:
            data_keys.remove("proposers")
            data__proposers = data["proposers"]
            if not isinstance(data__proposers, (list, tuple)):
                raise JsonSchemaValueException
            data__proposers_is_list = isinstance(data__proposers, (list, tuple))
            if data__proposers_is_list:
                data__proposers_len = len(data__proposers)
                for data__proposers_x, data__proposers_item in enumerate(data__proposers):
                    validate_https___mergegate_dev_schemas_policy_schema_json___defs_person(data__proposers_item, custom_formats, (name_prefix or "data") + ".proposers[{data__proposers_x}]".format(**locals()))
        if "runners" in data_keys:
            data_keys.remove("runners")
            data__runners = data["runners"]
            if not isinstance(data__runners, (list, tuple)):
                raise JsonSchemaValueException
            data__runners_is_list = isinstance(data__runners, (list, tuple))
            if data__runners_is_list:
                data__runners_len = len(data__runners)
                for data__runners_x, data__runners_item in enumerate(data__runners):
                    validate_https___mergegate_dev_schemas_policy_schema_json___defs_person(data__runners_item, custom_formats, (name_prefix or "data") + ".runners[{data__runners_x}]".format(**locals()))
        if "groups" in data_keys:
            data_keys.remove("groups")
            data__groups = data["groups"]
            if not isinstance(data__groups, (dict)):
                raise JsonSchemaValueException
            data__groups_is_dict = isinstance(data__groups, dict)
            if data__groups_is_dict:
                data__groups_keys = set(data__groups.keys())
                for data__groups_key in data__groups_keys:
                    if data__groups_key not in []:
                        data__groups_value = data__groups.get(data__groups_key)
                        if not isinstance(data__groups_value, (list, tuple)):
                            raise JsonSchemaValueException
                        data__groups_value_is_list = isinstance(data__groups_value, (list, tuple))
                        if data__groups_value_is_list:
                            data__groups_value_len = len(data__groups_value)
                            for data__groups_value_x, data__groups_value_item in enumerate(data__groups_value):
                                validate_https___mergegate_dev_schemas_policy_schema_json___defs_name(data__groups_value_item, custom_formats, (name_prefix or "data") + ".groups.{data__groups_key}[{data__groups_value_x}]".format(**locals()))
                data__groups_len = len(data__groups)
                if data__groups_len != 0:
                    data__groups_property_names = True
                    for data__groups_key in data__groups:
                        try:
                            validate_https___mergegate_dev_schemas_policy_schema_json___defs_name(data__groups_key, custom_formats, (name_prefix or "data") + ".groups")
                        except (JsonSchemaValueException, JsonSchemaValuesException):
                            data__groups_property_names = False
                    if not data__groups_property_names:
                        raise JsonSchemaValueException
        if "approvals_required" in data_keys:
            data_keys.remove("approvals_required")
            data__approvalsrequired = data["approvals_required"]
            if not isinstance(data__approvalsrequired, (int)) and not (isinstance(data__approvalsrequired, float) and data__approvalsrequired.is_integer()) or isinstance(data__approvalsrequired, bool):
                raise JsonSchemaValueException
            if isinstance(data__approvalsrequired, (int, float, Decimal)) and not isinstance(data__approvalsrequired, bool):
                if data__approvalsrequired < 1:
                    raise JsonSchemaValueException
        if "policy_approvals_required" in data_keys:
            data_keys.remove("policy_approvals_required")
            data__policyapprovalsrequired = data["policy_approvals_required"]
            if not isinstance(data__policyapprovalsrequired, (int)) and not (isinstance(data__policyapprovalsrequired, float) and data__policyapprovalsrequired.is_integer()) or isinstance(data__policyapprovalsrequired, bool):
                raise JsonSchemaValueException
            if isinstance(data__policyapprovalsrequired, (int, float, Decimal)) and not isinstance(data__policyapprovalsrequired, bool):
                if data__policyapprovalsrequired < 1:
                    raise JsonSchemaValueException
        if "allow_self_approval" in data_keys:
            data_keys.remove("allow_self_approval")
            data__allowselfapproval = data["allow_self_approval"]
            if not isinstance(data__allowselfapproval, (bool)):
                raise JsonSchemaValueException
        if "require_signed_proposals" in data_keys:
            data_keys.remove("require_signed_proposals")
            data__requiresignedproposals = data["require_signed_proposals"]
            if not isinstance(data__requiresignedproposals, (bool)):
                raise JsonSchemaValueException
        if "approval_rules" in data_keys:
            data_keys.remove("approval_rules")
            data__approvalrules = data["approval_rules"]
            if not isinstance(data__approvalrules, (list, tuple)):
                raise JsonSchemaValueException
            data__approvalrules_is_list = isinstance(data__approvalrules, (list, tuple))
            if data__approvalrules_is_list:
                data__approvalrules_len = len(data__approvalrules)
                for data__approvalrules_x, data__approvalrules_item in enumerate(data__approvalrules):
                    if not isinstance(data__approvalrules_item, (dict)):
                        raise JsonSchemaValueException
                    data__approvalrules_item_is_dict = isinstance(data__approvalrules_item, dict)
                    if data__approvalrules_item_is_dict:
                        data__approvalrules_item_keys = set(data__approvalrules_item.keys())
                        if "name" in data__approvalrules_item_keys:
                            data__approvalrules_item_keys.remove("name")
                            data__approvalrules_item__name = data__approvalrules_item["name"]
                            if not isinstance(data__approvalrules_item__name, (str)):
                                raise JsonSchemaValueException
                        if "paths" in data__approvalrules_item_keys:
                            data__approvalrules_item_keys.remove("paths")
                            data__approvalrules_item__paths = data__approvalrules_item["paths"]
                            if not isinstance(data__approvalrules_item__paths, (list, tuple)):
                                raise JsonSchemaValueException
                            data__approvalrules_item__paths_is_list = isinstance(data__approvalrules_item__paths, (list, tuple))
                            if data__approvalrules_item__paths_is_list:
                                data__approvalrules_item__paths_len = len(data__approvalrules_item__paths)
                                if data__approvalrules_item__paths_len < 1:
                                    raise JsonSchemaValueException
                                for data__approvalrules_item__paths_x, data__approvalrules_item__paths_item in enumerate(data__approvalrules_item__paths):
                                    if not isinstance(data__approvalrules_item__paths_item, (str)):
                                        raise JsonSchemaValueException
                                    if isinstance(data__approvalrules_item__paths_item, str):
                                        data__approvalrules_item__paths_item_len = len(data__approvalrules_item__paths_item)
                                        if data__approvalrules_item__paths_item_len < 1:
                                            raise JsonSchemaValueException
                        if "labels" in data__approvalrules_item_keys:
                            data__approvalrules_item_keys.remove("labels")
                            data__approvalrules_item__labels = data__approvalrules_item["labels"]
                            if not isinstance(data__approvalrules_item__labels, (list, tuple)):
                                raise JsonSchemaValueException
                            data__approvalrules_item__labels_is_list = isinstance(data__approvalrules_item__labels, (list, tuple))
                            if data__approvalrules_item__labels_is_list:
                                data__approvalrules_item__labels_len = len(data__approvalrules_item__labels)
                                if data__approvalrules_item__labels_len < 1:
                                    raise JsonSchemaValueException
                                for data__approvalrules_item__labels_x, data__approvalrules_item__labels_item in enumerate(data__approvalrules_item__labels):
                                    if not isinstance(data__approvalrules_item__labels_item, (str)):
                                        raise JsonSchemaValueException
                                    if isinstance(data__approvalrules_item__labels_item, str):
                                        data__approvalrules_item__labels_item_len = len(data__approvalrules_item__labels_item)
                                        if data__approvalrules_item__labels_item_len < 1:
                                            raise JsonSchemaValueException
                        if "require" in data__approvalrules_item_keys:
                            data__approvalrules_item_keys.remove("require")
                            data__approvalrules_item__require = data__approvalrules_item["require"]
                            validate_https___mergegate_dev_schemas_policy_schema_json___defs_requirement(data__approvalrules_item__require, custom_formats, (name_prefix or "data") + ".approval_rules[{data__approvalrules_x}].require".format(**locals()))
                        if "approvals_required" in data__approvalrules_item_keys:
                            data__approvalrules_item_keys.remove("approvals_required")
                            data__approvalrules_item__approvalsrequired = data__approvalrules_item["approvals_required"]
                            if not isinstance(data__approvalrules_item__approvalsrequired, (int)) and not (isinstance(data__approvalrules_item__approvalsrequired, float) and data__approvalrules_item__approvalsrequired.is_integer()) or isinstance(data__approvalrules_item__approvalsrequired, bool):
                                raise JsonSchemaValueException
                            if isinstance(data__approvalrules_item__approvalsrequired, (int, float, Decimal)) and not isinstance(data__approvalrules_item__approvalsrequired, bool):
                                if data__approvalrules_item__approvalsrequired < 1:
                                    raise JsonSchemaValueException
                        if "windows" in data__approvalrules_item_keys:
                            data__approvalrules_item_keys.remove("windows")
                            data__approvalrules_item__windows = data__approvalrules_item["windows"]
                            validate_https___mergegate_dev_schemas_policy_schema_json___defs_window_names(data__approvalrules_item__windows, custom_formats, (name_prefix or "data") + ".approval_rules[{data__approvalrules_x}].windows".format(**locals()))
                        if "max_approval_age" in data__approvalrules_item_keys:
                            data__approvalrules_item_keys.remove("max_approval_age")
                            data__approvalrules_item__maxapprovalage = data__approvalrules_item["max_approval_age"]
                            validate_https___mergegate_dev_schemas_policy_schema_json___defs_duration(data__approvalrules_item__maxapprovalage, custom_formats, (name_prefix or "data") + ".approval_rules[{data__approvalrules_x}].max_approval_age".format(**locals()))
                        if data__approvalrules_item_keys:
                            raise JsonSchemaValueException
        if "commands" in data_keys:
            data_keys.remove("commands")
            data__commands = data["commands"]
            if not isinstance(data__commands, (list, tuple)):
                raise JsonSchemaValueException
            data__commands_is_list = isinstance(data__commands, (list, tuple))
            if data__commands_is_list:
                data__commands_len = len(data__commands)
                for data__commands_x, data__commands_item in enumerate(data__commands):
                    if not isinstance(data__commands_item, (dict)):
                        raise JsonSchemaValueException
                    data__commands_item_is_dict = isinstance(data__commands_item, dict)
                    if data__commands_item_is_dict:
                        data__commands_item__missing_keys = set(['program']) - data__commands_item.keys()
                        if data__commands_item__missing_keys:
                            raise JsonSchemaValueException
                        data__commands_item_keys = set(data__commands_item.keys())
                        if "program" in data__commands_item_keys:
                            data__commands_item_keys.remove("program")
                            data__commands_item__program = data__commands_item["program"]
                            if not isinstance(data__commands_item__program, (str)):
                                raise JsonSchemaValueException
                            if isinstance(data__commands_item__program, str):
                                data__commands_item__program_len = len(data__commands_item__program)
                                if data__commands_item__program_len < 1:
                                    raise JsonSchemaValueException
                        if "args_prefix" in data__commands_item_keys:
                            data__commands_item_keys.remove("args_prefix")
                            data__commands_item__argsprefix = data__commands_item["args_prefix"]
                            if not isinstance(data__commands_item__argsprefix, (list, tuple)):
                                raise JsonSchemaValueException
                            data__commands_item__argsprefix_is_list = isinstance(data__commands_item__argsprefix, (list, tuple))
                            if data__commands_item__argsprefix_is_list:
                                data__commands_item__argsprefix_len = len(data__commands_item__argsprefix)
                                for data__commands_item__argsprefix_x, data__commands_item__argsprefix_item in enumerate(data__commands_item__argsprefix):
                                    if not isinstance(data__commands_item__argsprefix_item, (str)):
                                        raise JsonSchemaValueException
                        if "network" in data__commands_item_keys:
                            data__commands_item_keys.remove("network")
                            data__commands_item__network = data__commands_item["network"]
                            if not isinstance(data__commands_item__network, (bool)):
                                raise JsonSchemaValueException
                        if data__commands_item_keys:
                            raise JsonSchemaValueException
        if "limits" in data_keys:
            data_keys.remove("limits")
            data__limits = data["limits"]
            if not isinstance(data__limits, (dict)):
                raise JsonSchemaValueException
            data__limits_is_dict = isinstance(data__limits, dict)
            if data__limits_is_dict:
                data__limits_keys = set(data__limits.keys())
                if "max_timeout_seconds" in data__limits_keys:
                    data__limits_keys.remove("max_timeout_seconds")
                    data__limits__maxtimeoutseconds = data__limits["max_timeout_seconds"]
                    validate_https___mergegate_dev_schemas_policy_schema_json___defs_positive(data__limits__maxtimeoutseconds, custom_formats, (name_prefix or "data") + ".limits.max_timeout_seconds")
                if "max_output_bytes" in data__limits_keys:
                    data__limits_keys.remove("max_output_bytes")
                    data__limits__maxoutputbytes = data__limits["max_output_bytes"]
                    validate_https___mergegate_dev_schemas_policy_schema_json___defs_positive(data__limits__maxoutputbytes, custom_formats, (name_prefix or "data") + ".limits.max_output_bytes")
                if "max_memory_mb" in data__limits_keys:
                    data__limits_keys.remove("max_memory_mb")
                    data__limits__maxmemorymb = data__limits["max_memory_mb"]
                    validate_https___mergegate_dev_schemas_policy_schema_json___defs_positive(data__limits__maxmemorymb, custom_formats, (name_prefix or "data") + ".limits.max_memory_mb")
                if "max_cpu_seconds" in data__limits_keys:
                    data__limits_keys.remove("max_cpu_seconds")
                    data__limits__maxcpuseconds = data__limits["max_cpu_seconds"]
                    validate_https___mergegate_dev_schemas_policy_schema_json___defs_positive(data__limits__maxcpuseconds, custom_formats, (name_prefix or "data") + ".limits.max_cpu_seconds")
                if "max_file_size_mb" in data__limits_keys:
                    data__limits_keys.remove("max_file_size_mb")
                    data__limits__maxfilesizemb = data__limits["max_file_size_mb"]
                    validate_https___mergegate_dev_schemas_policy_schema_json___defs_positive(data__limits__maxfilesizemb, custom_formats, (name_prefix or "data") + ".limits.max_file_size_mb")
                if "max_processes" in data__limits_keys:
                    data__limits_keys.remove("max_processes")
                    data__limits__maxprocesses = data__limits["max_processes"]
                    validate_https___mergegate_dev_schemas_policy_schema_json___defs_positive(data__limits__maxprocesses, custom_formats, (name_prefix or "data") + ".limits.max_processes")
                if "max_open_files" in data__limits_keys:
                    data__limits_keys.remove("max_open_files")
                    data__limits__maxopenfiles = data__limits["max_open_files"]
                    validate_https___mergegate_dev_schemas_policy_schema_json___defs_positive(data__limits__maxopenfiles, custom_formats, (name_prefix or "data") + ".limits.max_open_files")
                if "kill_grace_seconds" in data__limits_keys:
                    data__limits_keys.remove("kill_grace_seconds")
                    data__limits__killgraceseconds = data__limits["kill_grace_seconds"]
                    if not isinstance(data__limits__killgraceseconds, (int, float, Decimal)) or isinstance(data__limits__killgraceseconds, bool):
                        raise JsonSchemaValueException
                    if isinstance(data__limits__killgraceseconds, (int, float, Decimal)) and not isinstance(data__limits__killgraceseconds, bool):
                        if data__limits__killgraceseconds < 0:
                            raise JsonSchemaValueException
                        if data__limits__killgraceseconds > 300:
                            raise JsonSchemaValueException
                if data__limits_keys:
                    raise JsonSchemaValueException
        if "env_allowlist" in data_keys:
            data_keys.remove("env_allowlist")
            data__envallowlist = data["env_allowlist"]
            if not isinstance(data__envallowlist, (list, tuple)):
                raise JsonSchemaValueException
            data__envallowlist_is_list = isinstance(data__envallowlist, (list, tuple))
            if data__envallowlist_is_list:
                data__envallowlist_len = len(data__envallowlist)
                for data__envallowlist_x, data__envallowlist_item in enumerate(data__envallowlist):
                    if not isinstance(data__envallowlist_item, (str)):
                        raise JsonSchemaValueException
                    if isinstance(data__envallowlist_item, str):
                        if not POLICY_PATTERNS['^[A-Za-z_][A-Za-z0-9_]*$'].search(data__envallowlist_item):
                            raise JsonSchemaValueException
        if "secret_env" in data_keys:
            data_keys.remove("secret_env")
            data__secretenv = data["secret_env"]
            if not isinstance(data__secretenv, (list, tuple)):
                raise JsonSchemaValueException
            data__secretenv_is_list = isinstance(data__secretenv, (list, tuple))
            if data__secretenv_is_list:
                data__secretenv_len = len(data__secretenv)
                for data__secretenv_x, data__secretenv_item in enumerate(data__secretenv):
                    if not isinstance(data__secretenv_item, (str)):
                        raise JsonSchemaValueException
                    if isinstance(data__secretenv_item, str):
                        if not POLICY_PATTERNS['^[A-Za-z_][A-Za-z0-9_]*$'].search(data__secretenv_item):
                            raise JsonSchemaValueException
        if "reserved_env" in data_keys:
            data_keys.remove("reserved_env")
            data__reservedenv = data["reserved_env"]
            if not isinstance(data__reservedenv, (list, tuple)):
                raise JsonSchemaValueException
            data__reservedenv_is_list = isinstance(data__reservedenv, (list, tuple))
            if data__reservedenv_is_list:
                data__reservedenv_len = len(data__reservedenv)
                for data__reservedenv_x, data__reservedenv_item in enumerate(data__reservedenv):
                    if not isinstance(data__reservedenv_item, (str)):
                        raise JsonSchemaValueException
                    if isinstance(data__reservedenv_item, str):
                        if not POLICY_PATTERNS['^[A-Za-z_][A-Za-z0-9_*]*$'].search(data__reservedenv_item):
                            raise JsonSchemaValueException
        if "path" in data_keys:
            data_keys.remove("path")
            data__path = data["path"]
            if not isinstance(data__path, (str)):
                raise JsonSchemaValueException
            if isinstance(data__path, str):
                data__path_len = len(data__path)
                if data__path_len < 1:
                    raise JsonSchemaValueException
        if "sandbox" in data_keys:
            data_keys.remove("sandbox")
            data__sandbox = data["sandbox"]
            if not (isinstance(data__sandbox, str) and data__sandbox == 'none' or isinstance(data__sandbox, str) and data__sandbox == 'bwrap'):
                raise JsonSchemaValueException
        if "keep_output" in data_keys:
            data_keys.remove("keep_output")
            data__keepoutput = data["keep_output"]
            if not isinstance(data__keepoutput, (bool)):
                raise JsonSchemaValueException
        if "max_retries" in data_keys:
            data_keys.remove("max_retries")
            data__maxretries = data["max_retries"]
            if not isinstance(data__maxretries, (int)) and not (isinstance(data__maxretries, float) and data__maxretries.is_integer()) or isinstance(data__maxretries, bool):
                raise JsonSchemaValueException
            if isinstance(data__maxretries, (int, float, Decimal)) and not isinstance(data__maxretries, bool):
                if data__maxretries < 0:
                    raise JsonSchemaValueException
                if data__maxretries > 100:
                    raise JsonSchemaValueException
        if "retry_backoff_seconds" in data_keys:
            data_keys.remove("retry_backoff_seconds")
            data__retrybackoffseconds = data["retry_backoff_seconds"]
            if not isinstance(data__retrybackoffseconds, (int, float, Decimal)) or isinstance(data__retrybackoffseconds, bool):
                raise JsonSchemaValueException
            if isinstance(data__retrybackoffseconds, (int, float, Decimal)) and not isinstance(data__retrybackoffseconds, bool):
                if data__retrybackoffseconds < 0:
                    raise JsonSchemaValueException
                if data__retrybackoffseconds > 86400:
                    raise JsonSchemaValueException
        if "max_retry_backoff_seconds" in data_keys:
            data_keys.remove("max_retry_backoff_seconds")
            data__maxretrybackoffseconds = data["max_retry_backoff_seconds"]
            if not isinstance(data__maxretrybackoffseconds, (int, float, Decimal)) or isinstance(data__maxretrybackoffseconds, bool):
                raise JsonSchemaValueException
            if isinstance(data__maxretrybackoffseconds, (int, float, Decimal)) and not isinstance(data__maxretrybackoffseconds, bool):
                if data__maxretrybackoffseconds < 0:
                    raise JsonSchemaValueException
                if data__maxretrybackoffseconds > 604800:
                    raise JsonSchemaValueException
        if "windows" in data_keys:
            data_keys.remove("windows")
            data__windows = data["windows"]
            if not isinstance(data__windows, (dict)):
                raise JsonSchemaValueException
            data__windows_is_dict = isinstance(data__windows, dict)
            if data__windows_is_dict:
                data__windows_keys = set(data__windows.keys())
                for data__windows_key in data__windows_keys:
                    if data__windows_key not in []:
                        data__windows_value = data__windows.get(data__windows_key)
                        validate_https___mergegate_dev_schemas_policy_schema_json___defs_window(data__windows_value, custom_formats, (name_prefix or "data") + ".windows.{data__windows_key}".format(**locals()))
                data__windows_len = len(data__windows)
                if data__windows_len != 0:
                    data__windows_property_names = True
                    for data__windows_key in data__windows:
                        try:
                            validate_https___mergegate_dev_schemas_policy_schema_json___defs_name(data__windows_key, custom_formats, (name_prefix or "data") + ".windows")
                        except (JsonSchemaValueException, JsonSchemaValuesException):
                            data__windows_property_names = False
                    if not data__windows_property_names:
                        raise JsonSchemaValueException
        if "run_windows" in data_keys:
            data_keys.remove("run_windows")
            data__runwindows = data["run_windows"]
            validate_https___mergegate_dev_schemas_policy_schema_json___defs_window_names(data__runwindows, custom_formats, (name_prefix or "data") + ".run_windows")
        if "max_approval_age" in data_keys:
            data_keys.remove("max_approval_age")
            data__maxapprovalage = data["max_approval_age"]
            validate_https___mergegate_dev_schemas_policy_schema_json___defs_duration(data__maxapprovalage, custom_formats, (name_prefix or "data") + ".max_approval_age")
        if "emergency" in data_keys:
            data_keys.remove("emergency")
            data__emergency = data["emergency"]
            if not isinstance(data__emergency, (dict)):
                raise JsonSchemaValueException
            data__emergency_is_dict = isinstance(data__emergency, dict)
            if data__emergency_is_dict:
                data__emergency__missing_keys = set(['approvers', 'review_within']) - data__emergency.keys()
                if data__emergency__missing_keys:
                    raise JsonSchemaValueException
                data__emergency_keys = set(data__emergency.keys())
                if "approvers" in data__emergency_keys:
                    data__emergency_keys.remove("approvers")
                    data__emergency__approvers = data__emergency["approvers"]
                    if not isinstance(data__emergency__approvers, (list, tuple)):
                        raise JsonSchemaValueException
                    data__emergency__approvers_is_list = isinstance(data__emergency__approvers, (list, tuple))
                    if data__emergency__approvers_is_list:
                        data__emergency__approvers_len = len(data__emergency__approvers)
                        if data__emergency__approvers_len < 1:
                            raise JsonSchemaValueException
                        def fn(var): return frozenset(dict((k, fn(v)) for k, v in var.items()).items()) if hasattr(var, "items") else tuple(fn(v) for v in var) if isinstance(var, (dict, list)) else (bool, var) if isinstance(var, bool) else var
                        if data__emergency__approvers_len > len(set(fn(data__emergency__approvers_x) for data__emergency__approvers_x in data__emergency__approvers)):
                            raise JsonSchemaValueException
                        for data__emergency__approvers_x, data__emergency__approvers_item in enumerate(data__emergency__approvers):
                            validate_https___mergegate_dev_schemas_policy_schema_json___defs_name(data__emergency__approvers_item, custom_formats, (name_prefix or "data") + ".emergency.approvers[{data__emergency__approvers_x}]".format(**locals()))
                if "count" in data__emergency_keys:
                    data__emergency_keys.remove("count")
                    data__emergency__count = data__emergency["count"]
                    validate_https___mergegate_dev_schemas_policy_schema_json___defs_positive(data__emergency__count, custom_formats, (name_prefix or "data") + ".emergency.count")
                if "review_within" in data__emergency_keys:
                    data__emergency_keys.remove("review_within")
                    data__emergency__reviewwithin = data__emergency["review_within"]
                    validate_https___mergegate_dev_schemas_policy_schema_json___defs_duration(data__emergency__reviewwithin, custom_formats, (name_prefix or "data") + ".emergency.review_within")
                if data__emergency_keys:
                    raise JsonSchemaValueException
        if "github" in data_keys:
            data_keys.remove("github")
            data__github = data["github"]
            if not isinstance(data__github, (dict)):
                raise JsonSchemaValueException
            data__github_is_dict = isinstance(data__github, dict)
            if data__github_is_dict:
                data__github_keys = set(data__github.keys())
                if "merge_keys" in data__github_keys:
                    data__github_keys.remove("merge_keys")
                    data__github__mergekeys = data__github["merge_keys"]
                    if not isinstance(data__github__mergekeys, (list, tuple)):
                        raise JsonSchemaValueException
                    data__github__mergekeys_is_list = isinstance(data__github__mergekeys, (list, tuple))
                    if data__github__mergekeys_is_list:
                        data__github__mergekeys_len = len(data__github__mergekeys)
                        if data__github__mergekeys_len < 1:
                            raise JsonSchemaValueException
                        for data__github__mergekeys_x, data__github__mergekeys_item in enumerate(data__github__mergekeys):
                            if not isinstance(data__github__mergekeys_item, (str)):
                                raise JsonSchemaValueException
                            if isinstance(data__github__mergekeys_item, str):
                                data__github__mergekeys_item_len = len(data__github__mergekeys_item)
                                if data__github__mergekeys_item_len < 1:
                                    raise JsonSchemaValueException
                if "allow_unmapped_authors" in data__github_keys:
                    data__github_keys.remove("allow_unmapped_authors")
                    data__github__allowunmappedauthors = data__github["allow_unmapped_authors"]
                    if not isinstance(data__github__allowunmappedauthors, (bool)):
                        raise JsonSchemaValueException
                if "empty_lookup_minutes" in data__github_keys:
                    data__github_keys.remove("empty_lookup_minutes")
                    data__github__emptylookupminutes = data__github["empty_lookup_minutes"]
                    if not isinstance(data__github__emptylookupminutes, (int)) and not (isinstance(data__github__emptylookupminutes, float) and data__github__emptylookupminutes.is_integer()) or isinstance(data__github__emptylookupminutes, bool):
                        raise JsonSchemaValueException
                    if isinstance(data__github__emptylookupminutes, (int, float, Decimal)) and not isinstance(data__github__emptylookupminutes, bool):
                        if data__github__emptylookupminutes < 1:
                            raise JsonSchemaValueException
                        if data__github__emptylookupminutes > 1440:
                            raise JsonSchemaValueException
                if data__github_keys:
                    raise JsonSchemaValueException
        if data_keys:
            raise JsonSchemaValueException
    return data

def validate_https___mergegate_dev_schemas_policy_schema_json___defs_window(data, custom_formats={}, name_prefix=None):
    if not isinstance(data, (dict)):
        raise JsonSchemaValueException
    data_any_of_count1 = 0
    if not data_any_of_count1:
        try:
            data_is_dict = isinstance(data, dict)
            if data_is_dict:
                data__missing_keys = set(['open']) - data.keys()
                if data__missing_keys:
                    raise JsonSchemaValueException
            data_any_of_count1 += 1
        except (JsonSchemaValueException, JsonSchemaValuesException): pass
    if not data_any_of_count1:
        try:
            data_is_dict = isinstance(data, dict)
            if data_is_dict:
                data__missing_keys = set(['closed']) - data.keys()
                if data__missing_keys:
                    raise JsonSchemaValueException
            data_any_of_count1 += 1
        except (JsonSchemaValueException, JsonSchemaValuesException): pass
    if not data_any_of_count1:
        raise JsonSchemaValueException
    data_is_dict = isinstance(data, dict)
    if data_is_dict:
        data_keys = set(data.keys())
        if "timezone" in data_keys:
            data_keys.remove("timezone")
            data__timezone = data["timezone"]
            if not isinstance(data__timezone, (str)):
                raise JsonSchemaValueException
            if isinstance(data__timezone, str):
                data__timezone_len = len(data__timezone)
                if data__timezone_len < 1:
                    raise JsonSchemaValueException
                if data__timezone_len > 100:
                    raise JsonSchemaValueException
        if "open" in data_keys:
            data_keys.remove("open")
            data__open = data["open"]
            validate_https___mergegate_dev_schemas_policy_schema_json___defs_spans(data__open, custom_formats, (name_prefix or "data") + ".open")
        if "closed" in data_keys:
            data_keys.remove("closed")
            data__closed = data["closed"]
            validate_https___mergegate_dev_schemas_policy_schema_json___defs_spans(data__closed, custom_formats, (name_prefix or "data") + ".closed")
        if data_keys:
            raise JsonSchemaValueException
    return data

def validate_https___mergegate_dev_schemas_policy_schema_json___defs_spans(data, custom_formats={}, name_prefix=None):
    if not isinstance(data, (list, tuple)):
        raise JsonSchemaValueException
    data_is_list = isinstance(data, (list, tuple))
    if data_is_list:
        data_len = len(data)
        if data_len < 1:
            raise JsonSchemaValueException
        for data_x, data_item in enumerate(data):
            if not isinstance(data_item, (str)):
                raise JsonSchemaValueException
            if isinstance(data_item, str):
                data_item_len = len(data_item)
                if data_item_len < 1:
                    raise JsonSchemaValueException
                if data_item_len > 200:
                    raise JsonSchemaValueException
    return data

def validate_https___mergegate_dev_schemas_policy_schema_json___defs_positive(data, custom_formats={}, name_prefix=None):
    if not isinstance(data, (int)) and not (isinstance(data, float) and data.is_integer()) or isinstance(data, bool):
        raise JsonSchemaValueException
    if isinstance(data, (int, float, Decimal)) and not isinstance(data, bool):
        if data < 1:
            raise JsonSchemaValueException
    return data

def validate_https___mergegate_dev_schemas_policy_schema_json___defs_duration(data, custom_formats={}, name_prefix=None):
    if not isinstance(data, (str)):
        raise JsonSchemaValueException
    if isinstance(data, str):
        if not POLICY_PATTERNS['^[0-9]{1,9}[smhd]$'].search(data):
            raise JsonSchemaValueException
    return data

def validate_https___mergegate_dev_schemas_policy_schema_json___defs_window_names(data, custom_formats={}, name_prefix=None):
    if not isinstance(data, (list, tuple)):
        raise JsonSchemaValueException
    data_is_list = isinstance(data, (list, tuple))
    if data_is_list:
        def fn(var): return frozenset(dict((k, fn(v)) for k, v in var.items()).items()) if hasattr(var, "items") else tuple(fn(v) for v in var) if isinstance(var, (dict, list)) else (bool, var) if isinstance(var, bool) else var
        data_len = len(data)
        if data_len > len(set(fn(data_x) for data_x in data)):
            raise JsonSchemaValueException
        for data_x, data_item in enumerate(data):
            validate_https___mergegate_dev_schemas_policy_schema_json___defs_name(data_item, custom_formats, (name_prefix or "data") + "[{data_x}]".format(**locals()))
    return data

def validate_https___mergegate_dev_schemas_policy_schema_json___defs_requirement(data, custom_formats={}, name_prefix=None):
    if not isinstance(data, (list, tuple)):
        raise JsonSchemaValueException
    data_is_list = isinstance(data, (list, tuple))
    if data_is_list:
        data_len = len(data)
        if data_len < 1:
            raise JsonSchemaValueException
        for data_x, data_item in enumerate(data):
            if not isinstance(data_item, (dict)):
                raise JsonSchemaValueException
            data_item_is_dict = isinstance(data_item, dict)
            if data_item_is_dict:
                data_item__missing_keys = set(['group', 'count']) - data_item.keys()
                if data_item__missing_keys:
                    raise JsonSchemaValueException
                data_item_keys = set(data_item.keys())
                if "group" in data_item_keys:
                    data_item_keys.remove("group")
                    data_item__group = data_item["group"]
                    validate_https___mergegate_dev_schemas_policy_schema_json___defs_name(data_item__group, custom_formats, (name_prefix or "data") + "[{data_x}].group".format(**locals()))
                if "count" in data_item_keys:
                    data_item_keys.remove("count")
                    data_item__count = data_item["count"]
                    if not isinstance(data_item__count, (int)) and not (isinstance(data_item__count, float) and data_item__count.is_integer()) or isinstance(data_item__count, bool):
                        raise JsonSchemaValueException
                    if isinstance(data_item__count, (int, float, Decimal)) and not isinstance(data_item__count, bool):
                        if data_item__count < 1:
                            raise JsonSchemaValueException
                if data_item_keys:
                    raise JsonSchemaValueException
    return data

def validate_https___mergegate_dev_schemas_policy_schema_json___defs_name(data, custom_formats={}, name_prefix=None):
    if not isinstance(data, (str)):
        raise JsonSchemaValueException
    if isinstance(data, str):
        if not POLICY_PATTERNS["^[^\\W_][\\w .'@-]{0,127}$"].search(data):
            raise JsonSchemaValueException
    return data

def validate_https___mergegate_dev_schemas_policy_schema_json___defs_person(data, custom_formats={}, name_prefix=None):
    if not isinstance(data, (dict)):
        raise JsonSchemaValueException
    data_any_of_count2 = 0
    if not data_any_of_count2:
        try:
            data_is_dict = isinstance(data, dict)
            if data_is_dict:
                data__missing_keys = set(['key']) - data.keys()
                if data__missing_keys:
                    raise JsonSchemaValueException
            data_any_of_count2 += 1
        except (JsonSchemaValueException, JsonSchemaValuesException): pass
    if not data_any_of_count2:
        try:
            data_is_dict = isinstance(data, dict)
            if data_is_dict:
                data__missing_keys = set(['keys']) - data.keys()
                if data__missing_keys:
                    raise JsonSchemaValueException
            data_any_of_count2 += 1
        except (JsonSchemaValueException, JsonSchemaValuesException): pass
    if not data_any_of_count2:
        try:
            data_is_dict = isinstance(data, dict)
            if data_is_dict:
                data__missing_keys = set(['github']) - data.keys()
                if data__missing_keys:
                    raise JsonSchemaValueException
            data_any_of_count2 += 1
        except (JsonSchemaValueException, JsonSchemaValuesException): pass
    if not data_any_of_count2:
        raise JsonSchemaValueException
    try:
        data_is_dict = isinstance(data, dict)
        if data_is_dict:
            data__missing_keys = set(['key', 'keys']) - data.keys()
            if data__missing_keys:
                raise JsonSchemaValueException
    except (JsonSchemaValueException, JsonSchemaValuesException): pass
    else:
        raise JsonSchemaValueException
    data_is_dict = isinstance(data, dict)
    if data_is_dict:
        data__missing_keys = set(['name']) - data.keys()
        if data__missing_keys:
            raise JsonSchemaValueException
        data_keys = set(data.keys())
        if "name" in data_keys:
            data_keys.remove("name")
            data__name = data["name"]
            validate_https___mergegate_dev_schemas_policy_schema_json___defs_name(data__name, custom_formats, (name_prefix or "data") + ".name")
        if "email" in data_keys:
            data_keys.remove("email")
            data__email = data["email"]
            if not isinstance(data__email, (str)):
                raise JsonSchemaValueException
            if isinstance(data__email, str):
                data__email_len = len(data__email)
                if data__email_len > 254:
                    raise JsonSchemaValueException
        if "emails" in data_keys:
            data_keys.remove("emails")
            data__emails = data["emails"]
            if not isinstance(data__emails, (list, tuple)):
                raise JsonSchemaValueException
            data__emails_is_list = isinstance(data__emails, (list, tuple))
            if data__emails_is_list:
                data__emails_len = len(data__emails)
                for data__emails_x, data__emails_item in enumerate(data__emails):
                    if not isinstance(data__emails_item, (str)):
                        raise JsonSchemaValueException
                    if isinstance(data__emails_item, str):
                        data__emails_item_len = len(data__emails_item)
                        if data__emails_item_len > 254:
                            raise JsonSchemaValueException
        if "key" in data_keys:
            data_keys.remove("key")
            data__key = data["key"]
            validate_https___mergegate_dev_schemas_policy_schema_json___defs_key(data__key, custom_formats, (name_prefix or "data") + ".key")
        if "keys" in data_keys:
            data_keys.remove("keys")
            data__keys = data["keys"]
            if not isinstance(data__keys, (list, tuple)):
                raise JsonSchemaValueException
            data__keys_is_list = isinstance(data__keys, (list, tuple))
            if data__keys_is_list:
                data__keys_len = len(data__keys)
                if data__keys_len < 1:
                    raise JsonSchemaValueException
                for data__keys_x, data__keys_item in enumerate(data__keys):
                    validate_https___mergegate_dev_schemas_policy_schema_json___defs_key(data__keys_item, custom_formats, (name_prefix or "data") + ".keys[{data__keys_x}]".format(**locals()))
        if "github" in data_keys:
            data_keys.remove("github")
            data__github = data["github"]
            data__github_one_of_count3 = 0
            if data__github_one_of_count3 < 2:
                try:
                    validate_https___mergegate_dev_schemas_policy_schema_json___defs_github_id(data__github, custom_formats, (name_prefix or "data") + ".github")
                    data__github_one_of_count3 += 1
                except (JsonSchemaValueException, JsonSchemaValuesException): pass
            if data__github_one_of_count3 < 2:
                try:
                    if not isinstance(data__github, (list, tuple)):
                        raise JsonSchemaValueException
                    data__github_is_list = isinstance(data__github, (list, tuple))
                    if data__github_is_list:
                        data__github_len = len(data__github)
                        if data__github_len < 1:
                            raise JsonSchemaValueException
                        def fn(var): return frozenset(dict((k, fn(v)) for k, v in var.items()).items()) if hasattr(var, "items") else tuple(fn(v) for v in var) if isinstance(var, (dict, list)) else (bool, var) if isinstance(var, bool) else var
                        if data__github_len > len(set(fn(data__github_x) for data__github_x in data__github)):
                            raise JsonSchemaValueException
                        for data__github_x, data__github_item in enumerate(data__github):
                            validate_https___mergegate_dev_schemas_policy_schema_json___defs_github_id(data__github_item, custom_formats, (name_prefix or "data") + ".github[{data__github_x}]".format(**locals()))
                    data__github_one_of_count3 += 1
                except (JsonSchemaValueException, JsonSchemaValuesException): pass
            if data__github_one_of_count3 != 1:
                raise JsonSchemaValueException
        if data_keys:
            raise JsonSchemaValueException
    return data

def validate_https___mergegate_dev_schemas_policy_schema_json___defs_github_id(data, custom_formats={}, name_prefix=None):
    if not isinstance(data, (int)) and not (isinstance(data, float) and data.is_integer()) or isinstance(data, bool):
        raise JsonSchemaValueException
    if isinstance(data, (int, float, Decimal)) and not isinstance(data, bool):
        if data < 1:
            raise JsonSchemaValueException
    return data

def validate_https___mergegate_dev_schemas_policy_schema_json___defs_key(data, custom_formats={}, name_prefix=None):
    data_one_of_count4 = 0
    if data_one_of_count4 < 2:
        try:
            if not isinstance(data, (str)):
                raise JsonSchemaValueException
            if isinstance(data, str):
                data_len = len(data)
                if data_len < 1:
                    raise JsonSchemaValueException
            data_one_of_count4 += 1
        except (JsonSchemaValueException, JsonSchemaValuesException): pass
    if data_one_of_count4 < 2:
        try:
            if not isinstance(data, (dict)):
                raise JsonSchemaValueException
            data_one_of_count5 = 0
            if data_one_of_count5 < 2:
                try:
                    data_is_dict = isinstance(data, dict)
                    if data_is_dict:
                        data__missing_keys = set(['key']) - data.keys()
                        if data__missing_keys:
                            raise JsonSchemaValueException
                    data_one_of_count5 += 1
                except (JsonSchemaValueException, JsonSchemaValuesException): pass
            if data_one_of_count5 < 2:
                try:
                    data_is_dict = isinstance(data, dict)
                    if data_is_dict:
                        data__missing_keys = set(['file']) - data.keys()
                        if data__missing_keys:
                            raise JsonSchemaValueException
                    data_one_of_count5 += 1
                except (JsonSchemaValueException, JsonSchemaValuesException): pass
            if data_one_of_count5 != 1:
                raise JsonSchemaValueException
            data_is_dict = isinstance(data, dict)
            if data_is_dict:
                data_keys = set(data.keys())
                if "key" in data_keys:
                    data_keys.remove("key")
                    data__key = data["key"]
                    if not isinstance(data__key, (str)):
                        raise JsonSchemaValueException
                    if isinstance(data__key, str):
                        data__key_len = len(data__key)
                        if data__key_len < 1:
                            raise JsonSchemaValueException
                if "file" in data_keys:
                    data_keys.remove("file")
                    data__file = data["file"]
                    if not isinstance(data__file, (str)):
                        raise JsonSchemaValueException
                    if isinstance(data__file, str):
                        if not POLICY_PATTERNS['^keys/[A-Za-z0-9._/-]+$'].search(data__file):
                            raise JsonSchemaValueException
                if "valid_after" in data_keys:
                    data_keys.remove("valid_after")
                    data__validafter = data["valid_after"]
                    validate_https___mergegate_dev_schemas_policy_schema_json___defs_timestamp(data__validafter, custom_formats, (name_prefix or "data") + ".valid_after")
                if "valid_before" in data_keys:
                    data_keys.remove("valid_before")
                    data__validbefore = data["valid_before"]
                    validate_https___mergegate_dev_schemas_policy_schema_json___defs_timestamp(data__validbefore, custom_formats, (name_prefix or "data") + ".valid_before")
                if data_keys:
                    raise JsonSchemaValueException
            data_one_of_count4 += 1
        except (JsonSchemaValueException, JsonSchemaValuesException): pass
    if data_one_of_count4 != 1:
        raise JsonSchemaValueException
    return data

def validate_https___mergegate_dev_schemas_policy_schema_json___defs_timestamp(data, custom_formats={}, name_prefix=None):
    if not isinstance(data, (str)):
        raise JsonSchemaValueException
    if isinstance(data, str):
        if not POLICY_PATTERNS['^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$'].search(data):
            raise JsonSchemaValueException
    return data


check_job = validate_https___mergegate_dev_schemas_job_schema_json
check_policy = validate_https___mergegate_dev_schemas_policy_schema_json
