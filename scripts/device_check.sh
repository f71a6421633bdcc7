#!/usr/bin/env bash
# One bounded device check of metashift-hf on a lent GPU machine (no internet there): install the carried
# wheels (scripts/device_wheels.sh made them here), build the demo world, then on the GPU (and the CPU as
# a baseline where cheap): evaluate EfficientNet-Lite0 (images/s with 1 decode thread and the default;
# CPU vs CUDA logits), fine-tune and linear-probe training, timm / torchvision random-weight models
# against a direct call of the same model on the GPU. Every figure goes to $OUT/device_check.json, the
# log to $OUT/log.txt; a failing step records its error and the next step runs.
#
# Usage (repository root):  bash scripts/device_check.sh [WORDNET]
#   WORDNET   folder or .tar.xz of the WordNet 3.0 dict files (default: $METASHIFT_HF_WORDNET_DICT,
#             else .devcarry/wordnet.tar.xz, else .devcarry/wordnet, else /usr/share/wordnet)
# Environment:
#   OUT=DIR          results (default /tmp/mhf-device-check-out; the device tool sets it)
#   DEVICE=cuda|cpu  where the "GPU" steps run (default cuda; cpu checks this script on a machine without one)
#   SMALL=1          small sizes (samples instead of whole tasks, 1 epoch, scale 0.1): the CPU check of the script
#   BUDGET_S=330     wall seconds for everything; each step gets what is left, minus a reserve
#   WORK=DIR         scratch (default /tmp/mhf-device-check, emptied first)
#   WHEELS=1         install .whl/*.whl into $WORK/site (0: use the installed packages, e.g. a CPU check on 3.11)
set -uo pipefail
cd "$(dirname "$0")/.."
T_START=$(date +%s)
export OUT=${OUT:-/tmp/mhf-device-check-out}
export DEVICE=${DEVICE:-cuda} SMALL=${SMALL:-0} BUDGET_S=${BUDGET_S:-330}
export WORK=${WORK:-/tmp/mhf-device-check}
PY=${PYTHON:-python3}
case "$WORK" in /tmp/?*) ;; *) echo "error: WORK must be a folder under /tmp (it is emptied first)" >&2; exit 2;; esac
mkdir -p "$OUT"
rm -rf "$WORK" && mkdir -p "$WORK"
exec > >(tee -a "$OUT/log.txt") 2>&1
echo "== device_check $(date -u +%FT%TZ) DEVICE=$DEVICE SMALL=$SMALL BUDGET_S=$BUDGET_S"

# --- setup: wheels, WordNet, the package (each recorded; the steps below report what is missing) ---
SETUP_NOTES=()
note() { SETUP_NOTES+=("$1"); echo "setup: $1"; }
if [ "${WHEELS:-1}" = 1 ] && ls .whl/*.whl >/dev/null 2>&1; then
  if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" .whl/*.whl; then
    export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
    note "wheels installed: $(ls .whl | tr '\n' ' ')"
  else
    note "wheel install FAILED"
  fi
else
  note "wheels not installed (WHEELS=${WHEELS:-1}, $(ls .whl/*.whl 2>/dev/null | wc -l) in .whl): using the installed packages"
fi
# The package itself: a regular (non-editable) install from this tree, no network, no build isolation
# (setuptools >= 77 reads project.license as a string); else a copy laid out as pyproject's package-dir
# maps it (builders/, wordnet_match/, cards/ under metashift_hf/).
if "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --target "$WORK/pkg" . ; then
  note "package installed with pip --no-build-isolation --target"
else
  rm -rf "$WORK/pkg" && mkdir -p "$WORK/pkg"
  cp -r metashift_hf "$WORK/pkg/" && cp -r builders wordnet_match cards "$WORK/pkg/metashift_hf/"
  note "pip install of the package FAILED; using a copy on PYTHONPATH (version reads 0.0.0+unknown)"
fi
export PYTHONPATH="$WORK/pkg${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONSAFEPATH=1  # the repo root (cwd) holds metashift_hf/ without builders/: import the installed package

WN=${1:-${METASHIFT_HF_WORDNET_DICT:-}}
if [ -z "$WN" ]; then
  for c in .devcarry/wordnet.tar.xz .devcarry/wordnet /usr/share/wordnet; do [ -e "$c" ] && { WN=$c; break; }; done
fi
if [ -n "$WN" ] && [ -f "$WN" ]; then
  mkdir -p "$WORK/wn"
  # Python's tarfile: no dependence on an xz binary there
  if "$PY" -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='data')" "$WN" "$WORK/wn"; then
    WN=$(dirname "$(find "$WORK/wn" -name index.noun | head -1)")
    note "WordNet unpacked from the tarball into $WN"
  else
    note "WordNet tarball $WN could not be unpacked"
  fi
fi
if [ -n "$WN" ] && [ -d "$WN" ]; then export METASHIFT_HF_WORDNET_DICT=$(cd "$WN" && pwd); note "METASHIFT_HF_WORDNET_DICT=$METASHIFT_HF_WORDNET_DICT";
else note "no WordNet dict folder found: matching will fail"; fi

# Offline and self-contained: every cache under $WORK, nothing from the network.
export METASHIFT_HF_CACHE="$WORK/cache" TORCH_HOME="$WORK/torch" HF_HOME="$WORK/hf" MPLBACKEND=Agg \
       HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export DEADLINE_AT=$((T_START + BUDGET_S)) SETUP_S=$(( $(date +%s) - T_START ))
export SETUP_NOTES_JSON=$("$PY" -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "${SETUP_NOTES[@]}")
echo "setup took ${SETUP_S}s"

"$PY" - <<'PYEOF'
import json, os, signal, subprocess, sys, time
from pathlib import Path

OUT, WORK, DEV = Path(os.environ["OUT"]), Path(os.environ["WORK"]), os.environ["DEVICE"]
SMALL = os.environ.get("SMALL") == "1"
DEADLINE = float(os.environ["DEADLINE_AT"])
RESERVE = 8  # seconds kept for writing the JSON after the last step
PY = sys.executable
report = {"device": DEV, "small": SMALL, "budget_s": float(os.environ["BUDGET_S"]),
          "setup_s": float(os.environ["SETUP_S"]), "setup": json.loads(os.environ["SETUP_NOTES_JSON"]),
          "steps": {}, "figures": {}}
T0 = time.time()


def save():
    report["driver_wall_s"] = round(time.time() - T0, 1)
    tmp = OUT / "device_check.json.tmp"
    tmp.write_text(json.dumps(report, indent=1, sort_keys=True, default=str))
    tmp.replace(OUT / "device_check.json")


def run(name, argv, timeout, env=None):
    """argv in its own process group, bounded by min(timeout, what the budget leaves); output to the log."""
    left = DEADLINE - time.time() - RESERVE
    shown = [a if i == 0 or argv[i - 1] != "-c" else "<snippet>" for i, a in enumerate(map(str, argv))]
    rec = {"argv": " ".join(shown)[-600:]}
    report["steps"][name] = rec
    if left < 10:
        rec.update(ok=False, skipped=f"out of budget ({left:.0f}s left)")
        print(f"-- {name}: skipped, {left:.0f}s left", flush=True)
        save()
        return rec, ""
    limit = min(timeout, left)
    print(f"\n-- {name} (limit {limit:.0f}s): {rec['argv'][:400]}", flush=True)
    t = time.perf_counter()
    p = subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True, env={**os.environ, **(env or {})})
    try:
        out, _ = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        rec["timed_out"] = True
    rec["wall_s"] = round(time.perf_counter() - t, 2)
    rec["rc"] = p.returncode
    rec["ok"] = p.returncode == 0
    print(out[-6000:], flush=True)
    if not rec["ok"]:
        rec["error"] = out[-2500:]
    print(f"-- {name}: rc {p.returncode}, {rec['wall_s']}s", flush=True)
    save()
    return rec, out


def result_of(out):
    """The JSON a snippet printed on its last 'RESULT ' line."""
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    return json.loads(lines[-1][7:]) if lines else None


def snippet(name, code, timeout, args=()):
    rec, out = run(name, [PY, "-c", code, *args], timeout)
    try:
        res = result_of(out)
    except ValueError as exc:
        res, rec["error"] = None, f"unreadable RESULT line: {exc}"
    if res is not None:
        rec["result"] = res
    save()
    return res


def mhf(name, args, timeout, env=None):
    return run(name, [PY, "-m", "metashift_hf", *args], timeout, env)[0]


def step(fn):
    """A step's own bug (a missing file, a KeyError) is recorded; the next step runs."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the check goes on whatever one step hits
        report["steps"].setdefault(fn.__name__, {})["driver_error"] = f"{type(exc).__name__}: {exc}"
        print(f"-- {fn.__name__}: driver error {type(exc).__name__}: {exc}", flush=True)
    save()


# ---------- the machine ----------
ENV_CODE = r'''
import json, os, platform, subprocess, importlib.metadata as md
r = {"python": platform.python_version(), "cores": len(os.sched_getaffinity(0))}
try:
    r["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                                      "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
except Exception as exc:
    r["nvidia_smi"] = f"unavailable: {exc}"
import torch
r.update(torch=torch.__version__, torch_cuda=torch.version.cuda, cuda_available=torch.cuda.is_available(),
         torch_threads=torch.get_num_threads(), cudnn=torch.backends.cudnn.version(),
         tf32_conv=torch.backends.cudnn.allow_tf32, tf32_matmul=torch.backends.cuda.matmul.allow_tf32)
if torch.cuda.is_available():
    r["gpu"] = torch.cuda.get_device_name(0)
vers = {}
for name in ["metashift-hf", "datasets", "huggingface_hub", "pyarrow", "pandas", "numpy", "fsspec", "timm", "torchvision",
             "transformers", "duckdb", "nltk", "pillow", "httpx2", "setuptools", "efficientnet-lite-pytorch"]:
    try:
        vers[name] = md.version(name)
    except md.PackageNotFoundError:
        vers[name] = None
r["versions"] = vers
from metashift_hf.models import decode_workers
r["decode_workers_default"] = {"cpu": decode_workers(None, "cpu"), "cuda": decode_workers(None, "cuda")}
print("RESULT " + json.dumps(r))
'''
report["machine"] = snippet("machine", ENV_CODE, 90) or {}

DEMO = WORK / "demo"
HUB = DEMO / "hub"
IMAGES = DEMO / "world" / "images"
TASK = {}  # role -> exported task folder


def demo():
    rec = mhf("demo", ["demo", "--no-eval", "--out", DEMO], 200)  # a smaller world lacks the paper tasks' groups
    for role, names in (("matched", ("imagenet-5", "bin-cat-dog")), ("subpop", ("paper-subpop-cat-dog-p12",))):
        for n in names:
            if (HUB / f"metashift-{n}").is_dir():
                TASK[role] = HUB / f"metashift-{n}"
                break
    rec["tasks"] = {k: v.name for k, v in TASK.items()}
    rec["images"] = sum(1 for _ in IMAGES.glob("*.jpg")) if IMAGES.is_dir() else 0


step(demo)

# ---------- evaluate: images/s on the device, 1 decode thread vs the default; logits CPU vs device ----------
SAMPLE = ["--sample", "25"] if SMALL else []  # SMALL: the CPU check of this script


def n_logits(folder):
    import pyarrow.parquet as pq
    return pq.read_metadata(folder / "logits.parquet").num_rows


def evaluate(name, extra, device, sample=None, timeout=150):
    out = WORK / name
    args = ["evaluate", "--model", "efficientnet-lite0", "--task", TASK["matched"], "--mode", "restricted",
            "--device", device, "--save-logits", "--no-progress", "--out", out, *extra]
    args += (["--sample", str(sample)] if sample is not None else SAMPLE)
    rec = mhf(name, args, timeout)
    if rec.get("ok"):
        n = n_logits(out)
        rec["images"] = n
        rec["images_per_s_wall"] = round(n / rec["wall_s"], 1)
        card = json.loads((out / "report.json").read_text())["run"]
        rec["runtime"] = card.get("runtime")
        rec["model_device"] = card["model"].get("device")
    return rec


def eval_overhead():
    # a 2-per-split run: the fixed cost of a command (imports, CUDA start, model load, scoring, plots)
    evaluate("eval_overhead", [], DEV, sample=2, timeout=90)


def eval_workers1():
    evaluate("eval_workers1", ["--workers", "1"], DEV)


def eval_default_workers():
    evaluate("eval_default_workers", [], DEV)


def eval_workers4():
    evaluate("eval_workers4", ["--workers", "4"], DEV)


def eval_cpu():
    # the same seeded sample as SMALL's device runs; else 40 per split, all inside the device's full run
    evaluate("eval_cpu", [], "cpu", sample=None if SMALL else 40, timeout=120)


def net_rates():
    over = report["steps"].get("eval_overhead", {})
    for name in ("eval_workers1", "eval_default_workers", "eval_workers4"):
        rec = report["steps"].get(name, {})
        if rec.get("ok") and over.get("ok"):
            n, dt = rec["images"] - over["images"], rec["wall_s"] - over["wall_s"]
            rec["images_per_s_net"] = round(n / dt, 1) if dt > 0 and n > 0 else None
            report["figures"][f"{name}_images_per_s_net"] = rec["images_per_s_net"]
        if rec.get("ok"):
            report["figures"][f"{name}_images_per_s_wall"] = rec["images_per_s_wall"]


COMPARE_CODE = r'''
import json, sys
import numpy as np, pyarrow.parquet as pq
def load(p):
    t = pq.read_table(p)
    return dict(zip(t.column("image_id").to_pylist(), np.asarray(t.column("logits").to_pylist(), dtype=np.float64)))
r = {}
for pair in sys.argv[1:]:
    label, a, b = pair.split("=", 2)[0], *pair.split("=", 2)[1].split(",")
    try:
        A, B = load(a), load(b)
    except Exception as exc:
        r[label] = {"error": f"{type(exc).__name__}: {exc}"}
        continue
    ids = sorted(set(A) & set(B))
    if not ids:
        r[label] = {"error": "no image in common"}
        continue
    x, y = np.stack([A[i] for i in ids]), np.stack([B[i] for i in ids])
    d = np.abs(x - y)
    r[label] = {"images": len(ids), "max_abs_diff": float(d.max()), "mean_abs_diff": float(d.mean()),
                "max_abs_logit": float(np.abs(y).max()), "top1_agree": float((x.argmax(1) == y.argmax(1)).mean())}
print("RESULT " + json.dumps(r))
'''


def compare_logits():
    pairs = []
    ref = WORK / "eval_workers1" / "logits.parquet"
    for label, other in (("cpu_vs_device", "eval_cpu"), ("default_vs_workers1", "eval_default_workers"),
                         ("workers4_vs_workers1", "eval_workers4")):
        f = WORK / other / "logits.parquet"
        if f.is_file() and ref.is_file():
            pairs.append(f"{label}={f},{ref}")
    if not pairs:
        report["steps"]["compare_logits"] = {"ok": False, "skipped": "no logits to compare"}
        return
    res = snippet("compare_logits", COMPARE_CODE, 60, pairs) or {}
    for label, r in res.items():
        for k in ("max_abs_diff", "top1_agree", "images"):
            if k in r:
                report["figures"][f"logits_{label}_{k}"] = r[k]


# ---------- train on the device: fine-tune (seconds per epoch) and the linear probe ----------
EPOCHS = 1 if SMALL else 2


def train_record(rec, out):
    if not rec.get("ok"):
        return
    runs = sorted(out.glob("seed-*/run.json"))
    if runs:
        run_json = json.loads(runs[0].read_text())
        rec["seed_seconds"] = run_json.get("seconds")
        rec["selected_epoch"] = run_json.get("selected_epoch")
    card = out / "run_card.json"
    if card.is_file():
        c = json.loads(card.read_text())
        rec["features"] = c.get("features")
        rec["card_seconds"] = c.get("seconds")
    log = out / "log.jsonl"
    if log.is_file():
        rec["epoch_log_tail"] = log.read_text().splitlines()[-3:]
    scores = out / "scores.json"
    if scores.is_file():
        rec["scores_head"] = scores.read_text()[:800]


def subpop_args():
    if SMALL:  # the CPU check: 170 training images
        return ["--task", "paper-subpop-cat-dog-p12", "--artifact", DEMO / "artifact", "--images", IMAGES, "--set", "scale=0.1"]
    return ["--task", TASK["subpop"]]  # the demo's export: scale 0.5, 850 training images


def train_finetune():
    out = WORK / "train_finetune"
    rec = mhf("train_finetune", ["train", *subpop_args(), "--probe", "finetune", "--epochs", EPOCHS,
                                 "--device", DEV, "--no-progress", "--out", out], 200)
    train_record(rec, out)
    if rec.get("seed_seconds"):
        # the seed's seconds (epochs, each with its validation pass, then every split predicted) / epochs:
        # an upper bound of one epoch's training time (log.jsonl records no time)
        rec["seconds_per_epoch_incl_eval"] = round(rec["seed_seconds"] / EPOCHS, 2)
        report["figures"]["finetune_seconds_per_epoch_incl_eval"] = rec["seconds_per_epoch_incl_eval"]
        report["figures"]["finetune_wall_s"] = rec["wall_s"]


def train_linear():
    out = WORK / "train_linear"
    extra = ["--epochs", "5"] if SMALL else []
    rec = mhf("train_linear", ["train", *subpop_args(), "--probe", "linear", "--device", DEV,
                               "--no-progress", "--out", out, *extra], 150)
    train_record(rec, out)
    if rec.get("ok"):
        report["figures"]["linear_wall_s"] = rec["wall_s"]
        if rec.get("features"):
            report["figures"]["linear_features_s"] = rec["features"].get("seconds")


# ---------- timm / torchvision random-weight models: the CLI's logits vs a direct call on the device ----------
MAKE_CODE = r'''
import json, sys, os
from pathlib import Path
import torch
which, folder = sys.argv[1], Path(sys.argv[2])
torch.manual_seed(0)
if which == "timm":
    import timm
    model = timm.create_model("resnet18", pretrained=False)
    timm.models.save_for_hf(model, folder, safe_serialization=True)  # the timm local-dir layout (as the tests)
    spec = f"timm:local-dir:{folder}"
else:
    import torchvision as tv
    model = tv.models.resnet18(weights=None)
    url = tv.models.get_model_weights("resnet18").DEFAULT.url
    ckpt = Path(torch.hub.get_dir()) / "checkpoints"
    ckpt.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), ckpt / url.rsplit("/", 1)[-1])  # where torchvision looks first: no download
    spec = "torchvision:resnet18"
print("RESULT " + json.dumps({"spec": spec}))
'''

DIRECT_CODE = r'''
import json, sys
from pathlib import Path
import numpy as np, pyarrow.parquet as pq, torch
which, folder, spec, logits_file, images, device = sys.argv[1:7]
from metashift_hf.models import load_model
clf = load_model(spec, device="cpu")  # only its preprocessing: the model is called directly below
if which == "timm":
    import timm
    from safetensors.torch import load_file
    model = timm.create_model("resnet18", pretrained=False)
    model.load_state_dict(load_file(str(Path(folder) / "model.safetensors")))
else:
    import torchvision as tv
    model = tv.models.resnet18(weights=None)
    url = tv.models.get_model_weights("resnet18").DEFAULT.url
    model.load_state_dict(torch.load(Path(torch.hub.get_dir()) / "checkpoints" / url.rsplit("/", 1)[-1]))
model = model.eval().to(device)
t = pq.read_table(logits_file)
ids = t.column("image_id").to_pylist()
got = np.asarray(t.column("logits").to_pylist(), dtype=np.float32)
x = torch.from_numpy(np.stack([clf.prepare((Path(images) / f"{i}.jpg").read_bytes()) for i in ids])).to(device)
with torch.inference_mode():
    want = torch.cat([model(x[k:k + 32]) for k in range(0, len(x), 32)]).float().cpu().numpy()
d = np.abs(got - want)
print("RESULT " + json.dumps({"images": len(ids), "max_abs_diff": float(d.max()), "max_abs_logit": float(np.abs(want).max()),
                              "top1_agree": float((got.argmax(1) == want.argmax(1)).mean()), "direct_device": device}))
'''


def ecosystem(which):
    folder = WORK / f"{which}-resnet18"
    made = snippet(f"{which}_make", MAKE_CODE, 90, [which, folder])
    if not made:
        return
    out = WORK / f"eval_{which}"
    rec = mhf(f"eval_{which}", ["evaluate", "--model", made["spec"], "--task", TASK["matched"], "--mode", "restricted",
                                "--device", DEV, "--sample", "10", "--save-logits", "--no-progress", "--out", out], 120)
    if not rec.get("ok"):
        return
    res = snippet(f"{which}_direct", DIRECT_CODE, 90,
                  [which, folder, made["spec"], out / "logits.parquet", IMAGES, DEV]) or {}
    for k in ("max_abs_diff", "top1_agree", "images"):
        if k in res:
            report["figures"][f"{which}_cli_vs_direct_{k}"] = res[k]


def eval_timm():
    ecosystem("timm")


def eval_torchvision():
    ecosystem("torchvision")


# ---------- in one process: decode threads vs the model's own rate (issue 28 part 2) ----------
SWEEP_CODE = r'''
import json, sys, time
from pathlib import Path
import numpy as np, torch
from metashift_hf.models import load_model, map_batches
images, device, n, small = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
ids = sorted(p.stem for p in images.glob("*.jpg"))[:n]
data = {i: (images / f"{i}.jpg").read_bytes() for i in ids}  # bytes in memory: decode + model only
clf = load_model("efficientnet-lite0", device=device)
sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
r = {"images": len(ids), "device": device, "batch_size": 32}
def emit():  # after every figure: a step cut by its limit still reports what it measured
    print("RESULT " + json.dumps(r), flush=True)
n_prep, reps = (32, 1) if small else (512, 3)
map_batches(clf.prepare, clf.logits, ids[:64 if small else 256], data.__getitem__, width=1000, batch_size=32, workers=4, progress=False)  # warm-up
t = time.perf_counter(); prepared = [clf.prepare(data[i]) for i in ids[:n_prep]]
r["decode_one_thread_images_per_s"] = round(len(prepared) / (time.perf_counter() - t), 1); emit()
for bs in (32, 128):
    batches = [prepared[k:k + bs] for k in range(0, len(prepared), bs)]
    clf.logits(batches[0]); sync()
    t = time.perf_counter()
    for _ in range(reps):
        for b in batches:
            clf.logits(b)
    sync()
    r[f"model_only_bs{bs}_images_per_s"] = round(reps * len(prepared) / (time.perf_counter() - t), 1); emit()
for w in ((1, 2) if small else (1, 2, 4, 8)):
    t = time.perf_counter()
    map_batches(clf.prepare, clf.logits, ids, data.__getitem__, width=1000, batch_size=32, workers=w, progress=False)
    sync()
    r[f"map_batches_workers{w}_images_per_s"] = round(len(ids) / (time.perf_counter() - t), 1); emit()
if device != "cpu":  # the CPU's own model rate beside it, on the same prepared images
    cpu = load_model("efficientnet-lite0", device="cpu")
    cpu.logits(prepared[:32])
    t = time.perf_counter()
    for k in range(0, min(len(prepared), 128), 32):
        cpu.logits(prepared[k:k + 32])
    r["cpu_model_only_bs32_images_per_s"] = round(min(len(prepared), 128) / (time.perf_counter() - t), 1); emit()
'''


def sweep():
    res = snippet("throughput_sweep", SWEEP_CODE, 120, [IMAGES, DEV, 64 if SMALL else 2000, "1" if SMALL else "0"])
    for k, v in (res or {}).items():
        if k.endswith("_per_s"):
            report["figures"][f"sweep_{k}"] = v


# In order of importance: what the budget cuts is the end of this list.
for fn in (eval_overhead, eval_workers1, eval_default_workers, eval_cpu, compare_logits, train_finetune, train_linear,
           eval_timm, eval_torchvision, sweep, eval_workers4, compare_logits, net_rates):
    if not TASK.get("matched") and fn.__name__.startswith(("eval", "compare", "sweep")) and fn is not sweep:
        report["steps"][fn.__name__] = {"ok": False, "skipped": "no matched task (demo failed)"}
        continue
    if not TASK.get("subpop") and fn.__name__.startswith("train"):
        report["steps"][fn.__name__] = {"ok": False, "skipped": "no subpopulation task (demo failed)"}
        continue
    step(fn)

report["ok_steps"] = sorted(k for k, v in report["steps"].items() if v.get("ok"))
report["failed_steps"] = sorted(k for k, v in report["steps"].items() if not v.get("ok"))
save()
print("\n== figures\n" + json.dumps(report["figures"], indent=1, sort_keys=True))
print(f"== failed or skipped steps: {report['failed_steps'] or 'none'}")
PYEOF
echo "== device_check done in $(( $(date +%s) - T_START ))s; $OUT/device_check.json"
