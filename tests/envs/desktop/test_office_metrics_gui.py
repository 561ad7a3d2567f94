"""`compare_table` on a workbook saved by the image's spreadsheet app (gnumeric's ssconvert) in a
real arborl/gui container, against a gold that a `cloud_file` getter reads from the download
cache: the shape of OSWorld's d1acdb87 (fill in a restaurant sheet), no action 0, solved 1.
Gnumeric saves strings inline (`t="inlineStr"`), which OSWorld's `read_cell_value` reads as
None; arborl reads them, so that the image's spreadsheet app's files can be scored at all."""

from __future__ import annotations

import pytest
from desktop_helpers import d1acdb87_rules

from arborl.envs.desktop.support import DESKTOP
from arborl.tasks.osworld import load_osworld_task

openpyxl = pytest.importorskip("openpyxl")

HEADER = "Restaurant Name,Address,Contact Number,Website"
ROWS = [
    ["Ollies Kitchen", "123 Main St, Springfield", "(555) 123-4567", "https://ollies.example"],
    ["Casa Bella", "9 Hill Rd, Shelbyville", "(555) 987-6543", "https://bella.example"],
]
# the sheet as the setup leaves it: no phone numbers yet
START = "\\n".join([HEADER] + [",".join(f'"{v}"' if i != 2 else "" for i, v in enumerate(r)) for r in ROWS])
# what the agent saves: d1acdb87's rules accept "Street" for "St" and "+1 555 ..." for "(555) ..."
DONE = "\\n".join(
    [
        HEADER,
        '"Ollies Kitchen","123 Main Street, Springfield",+1 555 123 4567,https://ollies.example',
        '"Casa Bella","9 Hill Road, Shelbyville",+1 555 987 6543,https://bella.example',
    ]
)
RULES = d1acdb87_rules(0, "EI0")


def spreadsheet_task(cache) -> object:
    task_id = "office-gnumeric-restaurants"
    gold = openpyxl.Workbook()
    gold.active.title = "Sheet1"
    gold.active.append(HEADER.split(","))
    for row in ROWS:
        gold.active.append(row)
    (cache / task_id).mkdir(parents=True)
    gold.save(cache / task_id / "MUST_VISIT_gold.xlsx")
    setup = f"printf '{START}\\n' > /tmp/start.csv && ssconvert /tmp/start.csv ~/Desktop/MUST_VISIT.xlsx"
    return load_osworld_task(
        {
            "id": task_id,
            "instruction": "Fill in the phone numbers of the restaurants in MUST_VISIT.xlsx.",
            "config": [{"type": "execute", "parameters": {"command": setup, "shell": True}}],
            "evaluator": {
                "func": "compare_table",
                "result": {
                    "type": "vm_file",
                    "path": "/home/user/Desktop/MUST_VISIT.xlsx",
                    "dest": "MUST_VISIT.xlsx",
                },
                "expected": {
                    "type": "cloud_file",
                    "path": "https://drive.example/gold",
                    "dest": "MUST_VISIT_gold.xlsx",
                },
                "options": {"rules": RULES},
            },
        },
        download_cache=cache,
        support=DESKTOP,
    )


@pytest.mark.docker
@pytest.mark.gui
def test_compare_table_scores_a_workbook_saved_by_gnumeric(desktop, tmp_path):
    from arborl.envs.event_loop import get_env_loop

    task = spreadsheet_task(tmp_path / "cache")
    _, info = desktop.reset(options={"task": task})
    assert all(s.get("exit_code", 0) == 0 for s in info["setup"]), info["setup"]
    _, reward, terminated, _, step = desktop.step("DONE")
    assert terminated and reward == 0.0, step["evaluation"]  # the phone numbers are missing

    desktop.reset(options={"task": task})
    solve = f"printf '{DONE}\\n' > /tmp/done.csv && ssconvert /tmp/done.csv ~/Desktop/MUST_VISIT.xlsx"
    sandbox, env = desktop.unwrapped.sandbox.raw, desktop.unwrapped.display.env
    r = get_env_loop().run(sandbox.exec(["/bin/sh", "-c", solve], workdir="/home/agent", env=env))
    assert r.exit_code == 0, r.output
    _, reward, terminated, _, step = desktop.step("DONE")
    assert terminated and reward == 1.0, step["evaluation"]
