"""The MetaShift Space: a Gradio app over the data layer (:mod:`.index`, :mod:`.graphs`, :mod:`.results`) and its
HTML (:mod:`.render`). ``python app.py --from EXPORT_FOLDER_OR_NAMESPACE [--results R ...] [--port P]``.

Views (tabs), each linked to the others by query strings the app reads on load (``?view=task&task=ID``,
``?view=classes&cls=C&task=T&node=S``, ``?view=leaderboard&model=M&task=T``, ``?view=distances&cls=C``):
Tasks (filters, a task's page), Classes and meta-graphs, Leaderboard (drill-down), Distances.

The first page is the tasks table, rendered from the index alone when the app starts (no row, no image read);
a task's rows, meta-graph facts and images are read when a view first asks for them.
"""

import argparse
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..core.errors import MetashiftError
from . import graphs, index, render, results


logger = logging.getLogger(__name__)

PER_PAGE = 50
VIEWS = ("tasks", "classes", "leaderboard", "distances")


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
    """Each view's HTML from plain arguments (what the Gradio events call; tests call them too)."""

    def __init__(self, data: SpaceData) -> None:
        self.data = data

    def tasks(self, family="", shift="", measured="", cls="", text="", page=1) -> str:
        df = index.filter_tasks(self.data.index, family=family, shift=shift, measured=measured, cls=cls, text=text)
        return render.tasks_html(df, page=int(page or 1), per_page=PER_PAGE, total=len(self.data.index.tasks))

    def task(self, task_id: str) -> str:
        if not task_id:
            return ""
        return _safe(lambda t: render.task_page_html(index.task_page(self.data.index, t)))(task_id)

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
            g = graphs.class_graph(self.data.index.task(task_id), cls)
            return render.distance_html(graphs.subset_distance(g, a, b))

        return _safe(view)(cls, task_id, a, b)

    def leaderboard(self, sort_by: str = "") -> str:
        r = self.data.results
        return render.leaderboard_html(results.headline_table(r, sort_by=sort_by), r.sources)

    def drilldown(self, model: str, task_id: str) -> str:
        if not (model and task_id):
            return ""
        return _safe(lambda m, t: render.drilldown_html(results.drilldown(self.data.results, m, t)))(model, task_id)


def build(data: SpaceData):
    """The Gradio Blocks of the Space."""
    import gradio as gr  # heavy optional library (the `space` extra): only the app needs it

    v = Views(data)
    ix = data.index
    classes = list(ix.classes)
    task_ids = [t.task_id for t in ix.tasks]
    res = data.results
    with gr.Blocks(title="MetaShift") as demo:
        gr.HTML(render.header_html(ix.source, len(ix.tasks), len(classes), len(res.board)))
        with gr.Tabs(selected="tasks") as tabs:
            with gr.Tab("Tasks", id="tasks"):
                with gr.Row():
                    fam = gr.Dropdown(["", *index.families(ix)], value="", label="family")
                    shift = gr.Dropdown(["", *index.shift_types(ix)], value="", label="shift (declared)")
                    measured = gr.Dropdown(["", *index.shift_types(ix)], value="", label="shift (measured)")
                    cls_filter = gr.Dropdown(["", *classes], value="", label="holds class")
                    text = gr.Textbox(label="task id contains")
                    page = gr.Number(value=1, precision=0, minimum=1, label="page")
                tasks_out = gr.HTML(v.tasks(), elem_id="ms-tasks")
                task_pick = gr.Dropdown(["", *task_ids], value="", label="task page")
                task_out = gr.HTML("", elem_id="ms-task")
            with gr.Tab("Classes and meta-graphs", id="classes"):
                with gr.Row():
                    class_pick = gr.Dropdown(classes, value=None, label="class")
                    class_task = gr.Dropdown([], value=None, label="task (the meta-graph it publishes)")
                    node_pick = gr.Dropdown([], value=None, label="subset (node)")
                graph_out = gr.HTML("", elem_id="ms-graph")
                node_out = gr.HTML("", elem_id="ms-node")
            with gr.Tab("Leaderboard", id="leaderboard"):
                with gr.Row():
                    sort = gr.Dropdown(["", *res.tasks()], value="", label="sort by task")
                    model_pick = gr.Dropdown(["", *res.models()], value="", label="model")
                    lb_task = gr.Dropdown(["", *res.tasks()], value="", label="task")
                board_out = gr.HTML(v.leaderboard(), elem_id="ms-board")
                drill_out = gr.HTML("", elem_id="ms-drill")
            with gr.Tab("Distances", id="distances"):
                with gr.Row():
                    d_class = gr.Dropdown(classes, value=None, label="class")
                    d_task = gr.Dropdown([], value=None, label="task")
                    d_a = gr.Dropdown([], value=None, label="subset A")
                    d_b = gr.Dropdown([], value=None, label="subset B")
                d_out = gr.HTML("", elem_id="ms-distance")

        # pickers answer the user (.input), not updates: a link's load sets several pickers without each one
        # re-rendering the views after it
        filters = [fam, shift, measured, cls_filter, text, page]
        for c in filters:
            c.change(v.tasks, filters, tasks_out)
        task_pick.input(v.task, task_pick, task_out)

        def pick_class(cls):
            """A class picked: its widest task, that task's meta-graph and subsets."""
            tasks = v.class_tasks(cls)
            task_id = tasks[0] if tasks else None
            return (gr.update(choices=tasks, value=task_id), *pick_graph(cls, task_id or ""))

        def pick_graph(cls, task_id):
            return v.graph(cls, task_id), gr.update(choices=v.subsets(cls, task_id), value=None), ""

        class_pick.input(pick_class, class_pick, [class_task, graph_out, node_pick, node_out])
        class_task.input(pick_graph, [class_pick, class_task], [graph_out, node_pick, node_out])
        node_pick.input(
            lambda c, t, n: (v.graph(c, t, n or ""), v.node(c, t, n or "")),
            [class_pick, class_task, node_pick],
            [graph_out, node_out],
        )
        sort.input(v.leaderboard, sort, board_out)
        model_pick.input(v.drilldown, [model_pick, lb_task], drill_out)
        lb_task.input(v.drilldown, [model_pick, lb_task], drill_out)

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
            return (gr.update(choices=tasks, value=task_id), *pick_pair(cls, task_id or ""))

        d_class.input(pick_distance_class, d_class, [d_task, d_a, d_b, d_out])
        d_task.input(pick_pair, [d_class, d_task], [d_a, d_b, d_out])
        for c in (d_a, d_b):
            c.input(v.distance, [d_class, d_task, d_a, d_b], d_out)

        def on_load(request: gr.Request):
            """The view a link asks for (``?view=...``): the tab, its pickers and its HTML."""
            q = dict(request.query_params) if request is not None else {}
            view = q.get("view", "tasks")
            keep = gr.update()
            out = {c: keep for c in (task_pick, task_out, class_pick, class_task, node_pick, graph_out, node_out)}
            out.update({c: keep for c in (model_pick, lb_task, drill_out, d_class, d_task, d_a, d_b, d_out)})
            tab = view if view in VIEWS else "tasks"
            if view == "task" and q.get("task") in ix.by_id:
                out[task_pick], out[task_out] = gr.update(value=q["task"]), v.task(q["task"])
            cls = q.get("cls", "")
            if view in ("classes", "distances") and cls in ix.classes:
                tasks = v.class_tasks(cls)
                task_id = q.get("task") if q.get("task") in tasks else tasks[0]
                subs = v.subsets(cls, task_id)
                if view == "classes":
                    node = q.get("node") if q.get("node") in subs else ""
                    out[class_pick] = gr.update(value=cls)
                    out[class_task] = gr.update(choices=tasks, value=task_id)
                    out[node_pick] = gr.update(choices=subs, value=node or None)
                    out[graph_out], out[node_out] = v.graph(cls, task_id, node), v.node(cls, task_id, node)
                else:
                    a = q.get("a") if q.get("a") in subs else (subs[0] if subs else None)
                    b = q.get("b") if q.get("b") in subs else (subs[1] if len(subs) > 1 else None)
                    out[d_class], out[d_task] = gr.update(value=cls), gr.update(choices=tasks, value=task_id)
                    out[d_a], out[d_b] = gr.update(choices=subs, value=a), gr.update(choices=subs, value=b)
                    out[d_out] = v.distance(cls, task_id, a or "", b or "")
            if view == "leaderboard" and q.get("model") and q.get("task"):
                out[model_pick], out[lb_task] = gr.update(value=q["model"]), gr.update(value=q["task"])
                out[drill_out] = v.drilldown(q["model"], q["task"])
            return {tabs: gr.Tabs(selected=tab), **out}

        demo.load(
            on_load,
            None,
            [tabs, task_pick, task_out, class_pick, class_task, node_pick, graph_out, node_out]
            + [model_pick, lb_task, drill_out, d_class, d_task, d_a, d_b, d_out],
        )
    return demo


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
    p.add_argument("--port", type=int, default=None, help="port to serve on (default: Gradio's, 7860)")
    p.add_argument("--host", default=None, help="address to serve on (default 127.0.0.1; a Space sets 0.0.0.0)")
    p.set_defaults(default_results=list(default_results))
    return p


def main(argv: Sequence[str] | None = None, *, default_source: str | None = None, default_results=()) -> int:
    """Serve the Space (what a Space repo's app.py calls)."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # a Space serves; it does not phone home
    args = parser(default_source, default_results).parse_args(argv)
    try:
        data = load(args.source, args.results if args.results is not None else args.default_results)
    except MetashiftError as exc:
        print(f"error: {exc.what}\nfix: {exc.fix}", file=sys.stderr)
        return 2
    build(data).launch(server_name=args.host, server_port=args.port, show_error=False, footer_links=[])
    return 0
