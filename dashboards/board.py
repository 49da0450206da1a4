"""The Grafana board for strategy-parallel search and its Prometheus alerting rules,
generated from code with Grafana's own Python SDK (grafana-foundation-sdk, the
`[dashboards]` extra).

    python dashboards/board.py     # rewrites dashboards/stratctl.json and stratctl-rules.yaml

One board draws the bottleneck before anyone tunes: how long Volcano takes to place gangs
and how many wait, PodGroups by phase, GPUs allocated and free, the API server's request
rate and its 429s and 5xx by verb, etcd's latency (its own commit latency and the API
server's view of it, which the breaker reads), and each stratctl submit loop's own
series (`submit --metrics-port`): target and trials in flight, pending gangs, 429s,
throttle waits and target changes, pruned trials. The rules alert on the same signals,
with stratctl's own thresholds (the etcd breaker's 250 ms).

`PANELS` and `RULES` are data: the tests evaluate every query against the testbed's
Prometheus while a study runs, and check the rules with `promtool`.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
BOARD = HERE / "stratctl.json"
RULES_FILE = HERE / "stratctl-rules.yaml"
RATE = "$__rate_interval"  # Grafana's rate window (the tests put 1m in its place)
STUDY = 'study=~"$study"'

# (row, title, unit, [(expr, legend)]): the board, top to bottom, two panels a line
PANELS = [
    (
        "Scheduling",
        "Volcano end-to-end scheduling latency",
        "ms",
        [
            (
                f"histogram_quantile({q}, sum by (le) "
                f"(rate(volcano_e2e_scheduling_latency_milliseconds_bucket[{RATE}])))",
                f"p{int(q * 100)}",
            )
            for q in (0.5, 0.9, 0.99)
        ],
    ),
    (
        "Scheduling",
        "Pending: PodGroups and unschedulable tasks",
        "short",
        [
            ("sum by (queue_name) (volcano_queue_pod_group_pending_count)", "PodGroups pending {{queue_name}}"),
            ("sum(volcano_unschedule_task_count)", "tasks unschedulable"),
            (f"sum by (study) (stratctl_gangs_pending{{{STUDY}}})", "gangs pending {{study}} (stratctl)"),
        ],
    ),
    (
        "Scheduling",
        "PodGroups by phase",
        "short",
        [(f"sum(volcano_queue_pod_group_{phase}_count)", phase) for phase in ("inqueue", "pending", "running")],
    ),
    (
        "Scheduling",
        "GPUs: allocated by queue, free in the cluster",
        "short",
        [
            (
                'sum by (queue_name) (volcano_queue_allocated_scalar_resources{resource="nvidia.com/gpu"})',
                "allocated {{queue_name}}",
            ),
            (f"max by (study) (stratctl_cluster_free_gpus{{{STUDY}}})", "free (as {{study}} sees it)"),
        ],
    ),
    (
        "API server and etcd",
        "API server requests by verb",
        "reqps",
        [(f"sum by (verb) (rate(apiserver_request_total[{RATE}]))", "{{verb}}")],
    ),
    (
        "API server and etcd",
        "API server 429 and 5xx by verb",
        "reqps",
        [
            (f'sum by (verb) (rate(apiserver_request_total{{code="429"}}[{RATE}]))', "429 {{verb}}"),
            (f'sum by (verb) (rate(apiserver_request_total{{code=~"5.."}}[{RATE}]))', "5xx {{verb}}"),
        ],
    ),
    (
        "API server and etcd",
        "etcd latency: commits, and the API server's requests (the breaker's signal)",
        "s",
        [
            (
                f"histogram_quantile(0.99, sum by (le) "
                f"(rate(etcd_disk_backend_commit_duration_seconds_bucket[{RATE}])))",
                "commit p99",
            ),
            (
                f"histogram_quantile(0.99, sum by (le) "
                f'(rate(etcd_request_duration_seconds_bucket{{operation!~"list.*"}}[{RATE}])))',
                "API server → etcd p99",
            ),
        ],
    ),
    (
        "API server and etcd",
        "etcd: requests the API server waits on, by operation",
        "ops",
        [(f"sum by (operation) (rate(etcd_request_duration_seconds_count[{RATE}]))", "{{operation}}")],
    ),
    (
        "stratctl",
        "Target and trials in flight",
        "short",
        [
            (f"sum by (study) (stratctl_target_in_flight{{{STUDY}}})", "target {{study}}"),
            (f"sum by (study) (stratctl_trials_in_flight{{{STUDY}}})", "in flight {{study}}"),
            (f"sum by (study) (stratctl_trials_waiting{{{STUDY}}})", "waiting {{study}}"),
        ],
    ),
    (
        "stratctl",
        "429s received and throttle waits",
        "short",
        [
            (f"sum by (study) (rate(stratctl_http_429_total{{{STUDY}}}[{RATE}]))", "429/s {{study}}"),
            (f"sum by (study) (rate(stratctl_throttle_waits_total{{{STUDY}}}[{RATE}]))", "throttle waits/s {{study}}"),
        ],
    ),
    (
        "stratctl",
        "Decisions: target changes, held admissions",
        "short",
        [
            (
                f"sum by (study) (increase(stratctl_target_changes_total{{{STUDY}}}[{RATE}]))",
                "target changes {{study}}",
            ),
            (f"max by (study) (stratctl_admission_held{{{STUDY}}})", "holding {{study}}"),
            (f"max by (study) (stratctl_api_quota_limited{{{STUDY}}})", "API quota limits {{study}}"),
        ],
    ),
    (
        "stratctl",
        "Trials ended: succeeded, pruned, failed",
        "short",
        [
            (f"sum by (study) (stratctl_trials_{state}{{{STUDY}}})", f"{state} {{{{study}}}}")
            for state in ("succeeded", "pruned", "failed")
        ],
    ),
]

# (alert, expr, for, severity, summary)
RULES = [
    (
        "StratctlEtcdSlow",
        "histogram_quantile(0.99, sum by (le) "
        '(rate(etcd_request_duration_seconds_bucket{operation!~"list.*"}[1m]))) > 0.25',
        "10s",
        "critical",
        "etcd p99 (the API server's requests) above 250 ms: stratctl's breaker holds submissions",
    ),
    (
        "StratctlEtcdCommitSlow",
        "histogram_quantile(0.99, sum by (le) (rate(etcd_disk_backend_commit_duration_seconds_bucket[5m]))) > 0.25",
        "5m",
        "warning",
        "etcd backend commit p99 above 250 ms for 5 minutes",
    ),
    (
        "StratctlSchedulerSlow",
        "histogram_quantile(0.9, sum by (le) (rate(volcano_e2e_scheduling_latency_milliseconds_bucket[5m]))) > 2000",
        "5m",
        "warning",
        "Volcano's scheduling cycles take over 2 s (p90): stratctl halves its target",
    ),
    (
        "StratctlApiServer429s",
        'sum(rate(apiserver_request_total{code="429"}[5m])) > 1',
        "5m",
        "warning",
        "the API server refuses more than one request a second with 429",
    ),
    (
        "StratctlApiServer5xx",
        'sum(rate(apiserver_request_total{code=~"5.."}[5m])) / sum(rate(apiserver_request_total[5m])) > 0.05',
        "5m",
        "critical",
        "over 5% of the API server's answers are 5xx",
    ),
    (
        "StratctlGangsStuck",
        "max by (study) (stratctl_gangs_stuck) > 0",
        "15m",
        "warning",
        "a study has gangs pending past the grace period for 15 minutes (see stratctl status)",
    ),
    (
        "StratctlWatchBroken",
        "max by (study) (stratctl_watch_broken) > 0",
        "5m",
        "warning",
        "a submit loop's watch has been broken for 5 minutes: it acts on a stale picture",
    ),
    (
        "StratctlApiQuotaLimits",
        "max by (study) (stratctl_api_quota_limited) > 0",
        "15m",
        "info",
        "the API quota, not the GPUs, has limited a study for 15 minutes",
    ),
]


def queries() -> list[str]:
    """Every query of the board and of the rules."""
    return [expr for _, _, _, targets in PANELS for expr, _ in targets] + [rule[1] for rule in RULES]


def dashboard() -> dict:
    """The board, built with grafana-foundation-sdk, as Grafana's dashboard JSON."""
    from grafana_foundation_sdk.builders.dashboard import Dashboard, DatasourceVariable, QueryVariable, Row
    from grafana_foundation_sdk.builders.prometheus import Dataquery
    from grafana_foundation_sdk.builders.timeseries import Panel
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import DataSourceRef

    source = DataSourceRef(type_val="prometheus", uid="${datasource}")
    board = (
        Dashboard("stratctl: strategy-parallel search")
        .uid("stratctl")
        .tags(["stratctl", "volcano", "kubernetes"])
        .refresh("10s")
        .time("now-1h", "now")
        .with_variable(DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
        .with_variable(
            QueryVariable("study")
            .label("study")
            .datasource(source)
            .query("label_values(stratctl_target_in_flight, study)")
            .include_all(True)
            .all_value(".*")
            .multi(True)
        )
    )
    row = None
    for section, title, unit, targets in PANELS:
        if section != row:
            board = board.with_row(Row(section))
            row = section
        panel = Panel().title(title).unit(unit).datasource(source).height(8).span(12)
        for i, (expr, legend) in enumerate(targets):
            panel = panel.with_target(Dataquery().expr(expr).legend_format(legend).ref_id("ABCDEFGH"[i]))
        board = board.with_panel(panel)
    return json.loads(json.dumps(board.build(), cls=JSONEncoder, sort_keys=True))


def rules() -> dict:
    return {
        "groups": [
            {
                "name": "stratctl",
                "rules": [
                    {
                        "alert": name,
                        "expr": expr,
                        "for": wait,
                        "labels": {"severity": severity},
                        "annotations": {"summary": summary},
                    }
                    for name, expr, wait, severity, summary in RULES
                ],
            }
        ]
    }


def board_text() -> str:
    return json.dumps(dashboard(), indent=2, sort_keys=True) + "\n"


def rules_text() -> str:
    return (
        "# Prometheus alerting rules for stratctl's signals (generated by dashboards/board.py; "
        "check: promtool check rules)\n" + yaml.safe_dump(rules(), sort_keys=False, width=120)
    )


if __name__ == "__main__":
    BOARD.write_text(board_text())
    RULES_FILE.write_text(rules_text())
    print(f"wrote {BOARD} and {RULES_FILE}")
