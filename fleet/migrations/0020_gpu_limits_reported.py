# GPU limits get one owner each (fleet/health/limits.py): the existing columns keep what an
# operator entered (inventory import, admin); new `reported_*` columns keep what the agent
# reported in gpu_info. In force: entered, else reported.
#
# Until now both writers shared the existing columns, so which one set a value is told from
# the agent's own last word, kept whole in `info` (its gpu_info, limits included):
# - reported_<name> := info.limits.<name> where the agent reported a number;
# - <name> stays an entered value where it has one that the agent did not report, or that
#   differs from it (the inventory or the admin wrote it after the agent); a value equal to
#   the agent's is the agent's, and the entered column is cleared (the value in force is the
#   same either way).
# A limit an agent already erased (gpu_info without it, after the inventory set it) is gone
# before this migration and is not recovered: import the inventory again.
#
# Backwards: each column holds the value in force again (entered, else reported).

from typing import Any

from django.db import migrations, models

# Frozen here: a later change to the limits kept is a new migration.
LIMITS = (
    "slowdown_c",
    "shutdown_c",
    "gpu_max_c",
    "mem_max_c",
    "tlimit_slowdown_c",
    "power_limit_max_w",
)
REPORTED = tuple(f"reported_{name}" for name in LIMITS)
BATCH = 500
ENTERED = "in force over the agent's reported value; blank: the agent's value applies"


def _reported(info: object, name: str) -> float | None:
    limits = info.get("limits") if isinstance(info, dict) else None
    value = limits.get(name) if isinstance(limits, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _save(model: Any, rows: list[Any]) -> None:
    model.objects.bulk_update(rows, [*LIMITS, *REPORTED], batch_size=BATCH)


def _checked_now(schema_editor: Any) -> None:
    # PostgreSQL: rows updated with deferred foreign-key checks pending block the ALTER
    # TABLE that follows in this transaction; checked at once, nothing is left pending.
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


def split(apps, schema_editor):  # type: ignore[no-untyped-def]
    _checked_now(schema_editor)
    gpu_model = apps.get_model("fleet", "GPU")
    changed = []
    for gpu in gpu_model.objects.only("id", "info", *LIMITS).iterator(chunk_size=BATCH):
        for name in LIMITS:
            reported = _reported(gpu.info, name)
            setattr(gpu, f"reported_{name}", reported)
            if reported is not None and getattr(gpu, name) == reported:
                setattr(gpu, name, None)
        changed.append(gpu)
        if len(changed) >= BATCH:
            _save(gpu_model, changed)
            changed = []
    if changed:
        _save(gpu_model, changed)


def fold(apps, schema_editor):  # type: ignore[no-untyped-def]
    _checked_now(schema_editor)
    gpu_model = apps.get_model("fleet", "GPU")
    for name in LIMITS:
        gpu_model.objects.filter(**{f"{name}__isnull": True}).update(
            **{name: models.F(f"reported_{name}")}
        )


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0019_secrets_at_rest"),
    ]

    operations = [
        *(
            migrations.AddField(
                model_name="gpu",
                name=column,
                field=models.FloatField(editable=False, null=True),
            )
            for column in REPORTED
        ),
        migrations.RunPython(split, fold),
        *(
            migrations.AlterField(
                model_name="gpu",
                name=name,
                field=models.FloatField(blank=True, help_text=ENTERED, null=True),
            )
            for name in LIMITS
            if name != "tlimit_slowdown_c"
        ),
        migrations.AlterField(
            model_name="gpu",
            name="tlimit_slowdown_c",
            field=models.FloatField(
                blank=True,
                help_text="slowdown as a T.Limit offset (e.g. −2); " + ENTERED,
                null=True,
            ),
        ),
    ]
