"""The MetaShift Space: a Gradio app over the data layer (:mod:`.index`, :mod:`.graphs`, :mod:`.results`) and its
HTML (:mod:`.render`). ``python app.py --from EXPORT_FOLDER_OR_NAMESPACE [--results R ...] [--port P]``.

Views (tabs), each linked to the others by query strings the app reads on load (``?view=task&task=ID``,
``?view=classes&cls=C&task=T&node=S``, ``?view=leaderboard&model=M&task=T``, ``?view=distances&cls=C``):
Tasks (filters; a row opens the Task tab), Task, Classes and meta-graphs, Leaderboard (drill-down), Distances.

The first page carries one page of the tasks table (a ``gr.Dataframe``), rendered from the index alone (no row,
no image read), and no long list: the leaderboard is read when its tab opens, a task or a model is typed into a
search box, and a picker lists at most :data:`MAX_CHOICES`. A task's rows, meta-graph facts and images are read
when a view first asks for them. The app takes no file (:data:`MAX_UPLOAD`).
"""

import argparse
import logging
import os
import socket
import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pandas as pd

from ..core.errors import MetashiftError
from ..core.options import OptionError
from . import graphs, index, relation, render, results, task_view


logger = logging.getLogger(__name__)

PER_PAGE = 50  # rows of a table page: the first page carries one page of tasks, whatever the index holds
MAX_CHOICES = 200  # a picker lists at most this many choices; a search box narrows longer lists
MAX_MODEL_COLUMNS = 30  # leaderboard columns (models) shown at once; the model filter picks others
MAX_UPLOAD = "1kb"  # the app takes no file: Gradio's upload route refuses anything larger (D1)
VIEWS = ("tasks", "task", "classes", "leaderboard", "distances")


@dataclass(frozen=True)
class SpaceData:
    """What the app serves: the task index and the results, read once at start."""

    index: index.TaskIndex
    results: results.Results


def load(source: str, result_sources: Sequence[str] = ()) -> SpaceData:
    return SpaceData(index.load_index(source), results.load_results(result_sources))


def _safe(fn: Callable[..., str]) -> Callable[..., str]:
    """A view's HTML, or the refusal (``error:``/``fix:``) in its place: a tampered task shows what the CLI says."""

    def call(*args: Any) -> str:
        try:
            return fn(*args)
        except MetashiftError as exc:
            return render.error_html(exc)

    return call


class Views:
    """Each view's HTML or table from plain arguments (what the Gradio events call; tests call them too)."""

    def __init__(self, data: SpaceData) -> None:
        self.data = data

    def tasks(self, family="", shift="", measured="", cls="", text="", page=1) -> tuple[pd.DataFrame, str]:
        """One page of the filtered tasks table and the line saying which rows it shows."""
        df = index.filter_tasks(
            self.data.index, family=family, shift=shift, measured=measured, cls=(cls or "").strip(), text=text
        )
        return render.page(df, page=int(page or 1), per_page=PER_PAGE, total=len(self.data.index.tasks), what="task")

    def task(self, task_id: str) -> str:
        """The task's page: the card's sentence, groups, measured shift, its data's licence and Hub pages."""
        if not task_id:
            return ""

        def view(t):
            page = index.task_page(self.data.index, t)
            e = page.entry
            return render.task_page_html(page) + render.task_data_html(task_view.card_facts(e), task_view.hub_links(e))

        return _safe(view)(task_id.strip())

    def task_images(self, task_id: str) -> tuple[list, list]:
        """(the card's figures, a few images of each group) of a task, each (file or URL, caption); none when the
        task cannot be read (its page says why)."""
        try:
            e = self.data.index.task((task_id or "").strip())
            return task_view.figures(e, task_view.card_facts(e)), task_view.gallery(e)
        except MetashiftError:
            return [], []

    def open_task(self, task_id: str) -> tuple[str, list, list]:
        return (self.task(task_id), *self.task_images(task_id))

    def class_tasks(self, cls: str) -> list[str]:
        return list(index.class_tasks(self.data.index, cls)) if cls in self.data.index.classes else []

    def graph(self, cls: str, task_id: str, node: str = "") -> str:
        if not cls or not task_id:
            return ""

        def view(cls, task_id, node):
            g = graphs.class_graph(self.data.index.task(task_id), cls)
            return render.graph_svg(g, selected=node)

        return _safe(view)(cls, task_id, node)

    def subsets(self, cls: str, task_id: str) -> list[str]:
        try:
            return [n.subset for n in graphs.class_graph(self.data.index.task(task_id), cls).nodes]
        except MetashiftError:
            return []

    def node(self, cls: str, task_id: str, node: str) -> str:
        if not (cls and task_id and node):
            return ""

        def view(cls, task_id, node):
            e = self.data.index.task(task_id)
            g = graphs.class_graph(e, cls)
            return render.node_html(g, node, graphs.thumbnails(e, node), graphs.distances_from(g, node))

        return _safe(view)(cls, task_id, node)

    def distance(self, cls: str, task_id: str, a: str, b: str) -> str:
        if not (cls and task_id and a and b):
            return ""

        def view(cls, task_id, a, b):
            e = self.data.index.task(task_id)
            g = graphs.class_graph(e, cls)
            pair, why = graphs.pair_distance(e, a, b)
            return render.distance_html(graphs.subset_distance(g, a, b), pair, why, e.repo)

        return _safe(view)(cls, task_id, a, b)

    def board(self, search: str = "", models: str = "", page=1) -> tuple[pd.DataFrame, str]:
        """One page of the leaderboard: tasks as rows (``search`` in the task id), models as columns (``models``
        in the name, at most :data:`MAX_MODEL_COLUMNS`), the majority baseline first."""
        r = self.data.results
        if r.empty:
            return pd.DataFrame(), render.NO_RESULTS
        table, cut = results.board_by_task(r, search=search, models=models, max_models=MAX_MODEL_COLUMNS)
        df, note = render.page(table, page=int(page or 1), per_page=PER_PAGE, total=len(r.tasks()), what="task")
        return df, note + (f" Showing {MAX_MODEL_COLUMNS} of {cut} models: filter them by name." if cut else "")

    def models(self) -> tuple[pd.DataFrame, str | None]:
        """The models' summary (headline, worst group, ID, OOD, gap, mean rank, tasks at or below the baseline)
        and the whole leaderboard as a CSV file to download (None without results)."""
        r = self.data.results
        if r.empty:
            return pd.DataFrame(), None
        csv = r.board.drop(columns=["source"]).to_csv(index=False).encode()
        return results.models_summary(r), task_view.serve_bytes(csv, ".csv")

    def drilldown(self, model: str, task_id: str) -> str:
        if not (model and task_id):
            return ""
        return _safe(self._drilldown)(model.strip(), task_id.strip())

    def _drilldown(self, model: str, task_id: str) -> str:
        """The per-group drill-down, then (for a published task with per-context results) accuracy against
        distance to training."""
        dd = results.drilldown(self.data.results, model, task_id)
        out = render.drilldown_html(dd)
        if task_id in self.data.index.by_id and not dd.groups.empty:
            out += _safe(lambda: render.relation_html(relation.relation(self.data.index.task(task_id), dd)))()
        return out


def build(data: SpaceData):
    """The Gradio Blocks of the Space: the header, one tab per view, each view's events, the link's view on load."""
    import gradio as gr  # heavy optional library (the `space` extra): only the app needs it

    v = Views(data)
    ui = _UI()
    with gr.Blocks(title="MetaShift") as demo:
        gr.HTML(
            render.header_html(
                data.index.source, len(data.index.tasks), len(data.index.classes), len(data.results.board)
            )
        )
        with gr.Tabs(selected="tasks") as ui.tabs:
            _tasks_tab(gr, v, ui)
            _task_tab(gr, ui)
            _classes_tab(gr, v, ui)
            _leaderboard_tab(gr, ui)
            _distances_tab(gr, v, ui)
        _wire_tasks(gr, v, ui)
        _wire_classes(gr, v, ui)
        _wire_leaderboard(gr, v, ui)
        _wire_distances(gr, v, ui)

        def on_load(request: gr.Request):
            return _on_load(gr, v, ui, request)

        demo.load(on_load, None, ui.load_outputs())
    return demo


class _UI:
    """The app's components, named (each build step fills its tab's)."""

    LOADED = (
        "task_id",
        "task_out",
        "task_figures",
        "task_gallery",
        "class_pick",
        "class_task",
        "node_pick",
        "graph_out",
        "node_out",
    )
    LOADED += ("models_out", "board_csv", "board_note", "board_out", "model_pick", "lb_task", "drill_out")
    LOADED += ("d_class", "d_task", "d_a", "d_b", "d_out")

    def load_outputs(self) -> list:
        return [self.tabs, *(getattr(self, name) for name in self.LOADED)]


def _tasks_tab(gr, v: Views, ui: _UI) -> None:
    ix = v.data.index
    with gr.Tab("Tasks", id="tasks"):
        with gr.Row():
            ui.fam = gr.Dropdown(["", *index.families(ix)], value="", label="family")
            ui.shift = gr.Dropdown(["", *index.shift_types(ix)], value="", label="shift (declared)")
            ui.measured = gr.Dropdown(["", *index.shift_types(ix)], value="", label="shift (measured)")
            ui.cls_filter = gr.Textbox(label="holds class", placeholder="a class name, e.g. cat")
            ui.text = gr.Textbox(label="task id contains")
            ui.page = gr.Number(value=1, precision=0, minimum=1, label="page")
        first, note = v.tasks()
        ui.tasks_note = gr.HTML(note, elem_id="ms-tasks-note")
        ui.tasks_out = gr.Dataframe(first, elem_id="ms-tasks", label="tasks (pick a row for its page)", **_TABLE)


_TABLE = dict(interactive=False, show_search="search", buttons=["copy", "fullscreen"], wrap=True, max_height=560)


def _task_tab(gr, ui: _UI) -> None:
    with gr.Tab("Task", id="task"):
        ui.task_id = gr.Textbox(label="task id", placeholder="a task id, or pick a row of the Tasks table")
        ui.task_out = gr.HTML("", elem_id="ms-task")
        ui.task_figures = gr.Gallery(label="the card's figures", columns=3, height="auto", elem_id="ms-figures")
        ui.task_gallery = gr.Gallery(
            label="images of each group (split · group · image id)", columns=6, height="auto", elem_id="ms-gallery"
        )


def _pickers(gr, first: list[str], *labels: str) -> list:
    """A row of filterable pickers: the first lists ``first`` (the classes), the others fill when it is picked."""
    with gr.Row():
        return [
            gr.Dropdown(first if i == 0 else [], value=None, label=t, filterable=True) for i, t in enumerate(labels)
        ]


def _classes_tab(gr, v: Views, ui: _UI) -> None:
    classes = list(v.data.index.classes)
    with gr.Tab("Classes and meta-graphs", id="classes"):
        ui.class_pick, ui.class_task, ui.node_pick = _pickers(
            gr, classes, "class", "task (the meta-graph it publishes)", "subset (node)"
        )
        ui.graph_out = gr.HTML("", elem_id="ms-graph")
        ui.node_out = gr.HTML("", elem_id="ms-node")


def _leaderboard_tab(gr, ui: _UI) -> None:
    with gr.Tab("Leaderboard", id="leaderboard") as ui.lb_tab:
        with gr.Row():
            ui.lb_search = gr.Textbox(label="task contains")
            ui.lb_models = gr.Textbox(label="model name contains")
            ui.lb_page = gr.Number(value=1, precision=0, minimum=1, label="page")
        ui.models_out = gr.Dataframe(
            None,
            elem_id="ms-models",
            label="models over the tasks (≤ baseline: tasks at or below the majority class)",
            **_TABLE,
        )
        ui.board_csv = gr.DownloadButton("leaderboard.csv", value=None, elem_id="ms-board-csv")
        ui.board_note = gr.HTML("", elem_id="ms-board-note")
        ui.board_out = gr.Dataframe(None, elem_id="ms-board", label="test balanced accuracy (pick a cell)", **_TABLE)
        with gr.Row():
            ui.model_pick = gr.Textbox(label="model")
            ui.lb_task = gr.Textbox(label="task")
        ui.drill_out = gr.HTML("", elem_id="ms-drill")


def _distances_tab(gr, v: Views, ui: _UI) -> None:
    classes = list(v.data.index.classes)
    with gr.Tab("Distances", id="distances"):
        ui.d_class, ui.d_task, ui.d_a, ui.d_b = _pickers(gr, classes, "class", "task", "subset A", "subset B")
        ui.d_out = gr.HTML("", elem_id="ms-distance")


def _wire_tasks(gr, v: Views, ui: _UI) -> None:
    # pickers answer the user (.input), not updates: a link's load sets several pickers without each one
    # re-rendering the views after it
    filters = [ui.fam, ui.shift, ui.measured, ui.cls_filter, ui.text, ui.page]
    for c in filters:
        c.input(lambda *a: v.tasks(*a)[::-1], filters, [ui.tasks_note, ui.tasks_out])

    def open_row(evt: gr.SelectData):
        """A row of the tasks table picked: its task opens in the Task tab."""
        task_id = str(evt.row_value[0]) if evt.row_value else ""
        return gr.Tabs(selected="task"), task_id, *v.open_task(task_id)

    task_view_out = [ui.task_out, ui.task_figures, ui.task_gallery]
    ui.tasks_out.select(open_row, None, [ui.tabs, ui.task_id, *task_view_out])
    ui.task_id.submit(v.open_task, ui.task_id, task_view_out)


def _wire_classes(gr, v: Views, ui: _UI) -> None:
    def pick_class(cls):
        """A class picked: its widest task, that task's meta-graph and subsets."""
        tasks = v.class_tasks(cls)
        task_id = tasks[0] if tasks else None
        return (gr.update(choices=tasks[:MAX_CHOICES], value=task_id), *pick_graph(cls, task_id or ""))

    def pick_graph(cls, task_id):
        return v.graph(cls, task_id), gr.update(choices=v.subsets(cls, task_id), value=None), ""

    ui.class_pick.input(pick_class, ui.class_pick, [ui.class_task, ui.graph_out, ui.node_pick, ui.node_out])
    ui.class_task.input(pick_graph, [ui.class_pick, ui.class_task], [ui.graph_out, ui.node_pick, ui.node_out])
    ui.node_pick.input(
        lambda c, t, n: (v.graph(c, t, n or ""), v.node(c, t, n or "")),
        [ui.class_pick, ui.class_task, ui.node_pick],
        [ui.graph_out, ui.node_out],
    )


def _wire_leaderboard(gr, v: Views, ui: _UI) -> None:
    """The board is read when its tab opens (never in the first page) and again when a filter changes."""
    inputs = [ui.lb_search, ui.lb_models, ui.lb_page]

    def board(*a):
        df, note = v.board(*a)
        return note, df

    ui.lb_tab.select(board, inputs, [ui.board_note, ui.board_out])
    ui.lb_tab.select(v.models, None, [ui.models_out, ui.board_csv])
    for c in inputs:
        c.input(board, inputs, [ui.board_note, ui.board_out])

    def pick_cell(table: pd.DataFrame, evt: gr.SelectData):
        """A cell picked: the model of its column on the task of its row (the task column: no model)."""
        col = evt.index[1] if isinstance(evt.index, (list, tuple)) else 0
        task_id = str(evt.row_value[0]) if evt.row_value else ""
        model = str(table.columns[col]) if 0 < col < len(table.columns) else ""
        return model, task_id, v.drilldown(model, task_id)

    ui.board_out.select(pick_cell, ui.board_out, [ui.model_pick, ui.lb_task, ui.drill_out])
    for c in (ui.model_pick, ui.lb_task):
        c.submit(v.drilldown, [ui.model_pick, ui.lb_task], ui.drill_out)


def _wire_distances(gr, v: Views, ui: _UI) -> None:
    def pick_pair(cls, task_id):
        """A task picked for Distances: its first two subsets and what is known between them."""
        subs = v.subsets(cls, task_id)
        a, b = (subs[0] if subs else None), (subs[1] if len(subs) > 1 else None)
        return (
            gr.update(choices=subs, value=a),
            gr.update(choices=subs, value=b),
            v.distance(cls, task_id, a or "", b or ""),
        )

    def pick_distance_class(cls):
        tasks = v.class_tasks(cls)
        task_id = tasks[0] if tasks else None
        return (gr.update(choices=tasks[:MAX_CHOICES], value=task_id), *pick_pair(cls, task_id or ""))

    ui.d_class.input(pick_distance_class, ui.d_class, [ui.d_task, ui.d_a, ui.d_b, ui.d_out])
    ui.d_task.input(pick_pair, [ui.d_class, ui.d_task], [ui.d_a, ui.d_b, ui.d_out])
    for c in (ui.d_a, ui.d_b):
        c.input(v.distance, [ui.d_class, ui.d_task, ui.d_a, ui.d_b], ui.d_out)


def _on_load(gr, v: Views, ui: _UI, request) -> dict:
    """The view a link asks for (``?view=...``): the tab, its pickers and its HTML."""
    q = dict(request.query_params) if request is not None else {}
    view = q.get("view", "tasks")
    keep = gr.update()
    out = {getattr(ui, name): keep for name in ui.LOADED}
    tab = view if view in VIEWS else "tasks"
    ix = v.data.index
    if view == "task" and q.get("task") in ix.by_id:
        out[ui.task_id] = gr.update(value=q["task"])
        out[ui.task_out], out[ui.task_figures], out[ui.task_gallery] = v.open_task(q["task"])
    cls = q.get("cls", "")
    if view in ("classes", "distances") and cls in ix.classes:
        tasks = v.class_tasks(cls)
        task_id = q.get("task") if q.get("task") in tasks else tasks[0]
        subs = v.subsets(cls, task_id)
        if view == "classes":
            node = q.get("node") if q.get("node") in subs else ""
            out[ui.class_pick] = gr.update(value=cls)
            out[ui.class_task] = gr.update(choices=tasks[:MAX_CHOICES], value=task_id)
            out[ui.node_pick] = gr.update(choices=subs, value=node or None)
            out[ui.graph_out], out[ui.node_out] = v.graph(cls, task_id, node), v.node(cls, task_id, node)
        else:
            a = q.get("a") if q.get("a") in subs else (subs[0] if subs else None)
            b = q.get("b") if q.get("b") in subs else (subs[1] if len(subs) > 1 else None)
            out[ui.d_class] = gr.update(value=cls)
            out[ui.d_task] = gr.update(choices=tasks[:MAX_CHOICES], value=task_id)
            out[ui.d_a], out[ui.d_b] = gr.update(choices=subs, value=a), gr.update(choices=subs, value=b)
            out[ui.d_out] = v.distance(cls, task_id, a or "", b or "")
    if view == "leaderboard":  # a tab selected by the link fires no select event: the board is read here
        out[ui.board_out], out[ui.board_note] = v.board()
        out[ui.models_out], out[ui.board_csv] = v.models()
    if view == "leaderboard" and q.get("model") and q.get("task"):
        out[ui.model_pick], out[ui.lb_task] = gr.update(value=q["model"]), gr.update(value=q["task"])
        out[ui.drill_out] = v.drilldown(q["model"], q["task"])
    return {ui.tabs: gr.Tabs(selected=tab), **out}


def parser(default_source: str | None = None, default_results: Sequence[str] = ()) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="The MetaShift Space: tasks, meta-graphs, leaderboards and distances.")
    p.add_argument(
        "--from",
        dest="source",
        default=default_source,
        required=default_source is None,
        help="an export folder (metashift-hf export --out) or a Hub namespace that publish filled",
    )
    p.add_argument(
        "--results",
        action="append",
        default=None,
        help="a zoo's results folder (evaluate --out) or results repo NS/NAME; repeat for several",
    )
    p.add_argument("--port", default=None, help="port to serve on, 1-65535 (default: Gradio's, 7860)")
    p.add_argument("--host", default=None, help="address to serve on (default 127.0.0.1; a Space sets 0.0.0.0)")
    p.set_defaults(default_results=list(default_results))
    return p


def main(argv: Sequence[str] | None = None, *, default_source: str | None = None, default_results=()) -> int:
    """Serve the Space (what a Space repo's app.py calls)."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # a Space serves; it does not phone home
    args = parser(default_source, default_results).parse_args(argv)
    try:
        port = free_port(args.port, args.host)  # before the index is read: a bad port costs nothing
        data = load(args.source, args.results if args.results is not None else args.default_results)
    except MetashiftError as exc:
        print(f"error: {exc.what}\nfix: {exc.fix}", file=sys.stderr)
        return 2
    build(data).launch(
        server_name=args.host,
        server_port=port,
        show_error=False,
        footer_links=[],
        max_file_size=MAX_UPLOAD,  # the app takes no file: an upload over 1 kB is refused (D1)
    )
    return 0


def free_port(value: str | None, host: str | None) -> int | None:
    """``--port``: a number in 1-65535 that nothing listens on at ``host``, else a refusal naming it (Gradio
    would raise OverflowError or OSError tracebacks). None: Gradio's default."""
    if value is None:
        return None
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise OptionError(f"--port {value!r} is not a port number", "pass --port 1-65535, e.g. --port 7860")
    addr = host or "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds (TIME_WAIT is free)
            s.bind((addr, port))
    except OSError as exc:
        raise OptionError(
            f"--port {port} on {addr} cannot be served ({exc.strerror or exc})",
            "pick a free port (e.g. --port 7861) or stop what listens on it",
        ) from None
    return port
