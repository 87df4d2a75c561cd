"""gateway/e2b/display.py: the e2b/data and e2b/chart display formats.

No gateway here. Most tests load the extension into an in-process IPython
shell, the way the gateway sends it, and check what the display formatter
makes of real matplotlib figures and pandas frames; the chart JSON is read
back with the unmodified E2B SDK's own deserializer. The last group runs a
real ipykernel (through jupyter_client) to cover the paths only a kernel
has: the inline backend's plt.show() and end-of-cell flush, and the JSON
packer that carries display data to the client.
"""
import datetime
import importlib.util
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_PATH = os.path.join(HERE, "..", "..", "gateway", "e2b", "display.py")

np = pytest.importorskip("numpy")
pd = pytest.importorskip("pandas")
pytest.importorskip("matplotlib")

from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from IPython.core.pylabtools import select_figure_formats  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from traitlets.config import Config  # noqa: E402


def load_sdk_charts():
    """The E2B SDK's charts.py, the code Result uses to read e2b/chart.

    Loaded by path: the SDK package itself needs a newer attrs than the
    Debian one pytest has already imported, but charts.py needs only the
    standard library.
    """
    candidates = [os.environ.get("E2B_PYTHON_SDK"),
                  os.path.join(HERE, "..", "..", "..", "shared", "e2b-python", "site"),
                  "/work/shared/e2b-python/site"]
    for site in filter(None, candidates):
        path = os.path.join(site, "e2b_code_interpreter", "charts.py")
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("e2b_sdk_charts", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    pytest.skip("the E2B Python SDK was not found: set E2B_PYTHON_SDK to its site/ directory",
                allow_module_level=True)


charts = load_sdk_charts()

with open(SOURCE_PATH) as f:
    SOURCE = f.read()


def loader(source=SOURCE):
    """The execute_request code the gateway sends to load the extension.

    As gateway/e2b/display.c builds it: the source as a JSON string, which
    is a valid Python string literal, run in a namespace of its own.
    """
    literal = json.dumps(source, ensure_ascii=True)
    return (f"(lambda ns: (exec(compile({literal}, 'glovebox/e2b_display.py', 'exec'), ns), "
            "ns['load_ipython_extension'](get_ipython())))({'__name__': "
            "'glovebox_e2b_display'})\n")


def private_module():
    """The file as a module of its own, to read its limits."""
    namespace = {"__name__": "e2b_display_under_test"}
    exec(compile(SOURCE, SOURCE_PATH, "exec"), namespace)
    return namespace


NAMES_BEFORE_LOAD = set()


@pytest.fixture(scope="module")
def shell(tmp_path_factory):
    os.environ["IPYTHONDIR"] = str(tmp_path_factory.mktemp("ipython"))
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    ip = InteractiveShell.instance(config=config)
    NAMES_BEFORE_LOAD.update(ip.user_ns)
    assert ip.run_cell(loader(), silent=True).success
    # What the inline backend does when it is configured, after the
    # extension is loaded: it drops every formatter's Figure printer and
    # registers its PNG one. The chart must survive it.
    select_figure_formats(ip, {"png"})
    return ip


def bundle(shell, obj):
    data, _ = shell.display_formatter.format(obj)
    return data


def chart_of(shell, fig):
    """The figure's e2b/chart as the SDK sees it after a trip through JSON."""
    data = bundle(shell, fig)
    assert "image/png" in data  # the chart comes with the picture, not instead
    wire = json.loads(json.dumps(data["e2b/chart"], allow_nan=False))
    return charts._deserialize_chart(wire)


def axes():
    fig = Figure()
    return fig, fig.subplots()


# --- loading -----------------------------------------------------------------


def test_loading_twice_leaks_no_names_and_replaces_the_formatters(shell):
    assert set(shell.user_ns) == NAMES_BEFORE_LOAD
    before = dict(shell.display_formatter.formatters)
    hooks = len(shell.events.callbacks["post_execute"])

    assert shell.run_cell(loader(), silent=True).success

    assert set(shell.user_ns) == NAMES_BEFORE_LOAD
    after = shell.display_formatter.formatters
    assert list(after) == list(before)  # same MIME types, same order, once each
    assert after["e2b/chart"] is not before["e2b/chart"]
    assert len(shell.events.callbacks["post_execute"]) == hooks
    select_figure_formats(shell, {"png"})
    fig, ax = axes()
    ax.plot([1, 2])
    assert chart_of(shell, fig).type == charts.ChartType.LINE


def test_loading_imports_no_pandas_matplotlib_or_numpy(tmp_path):
    script = f"""
import json, sys, time
from traitlets.config import Config
from IPython.core.interactiveshell import InteractiveShell
config = Config()
config.HistoryManager.hist_file = ":memory:"
ip = InteractiveShell.instance(config=config)
before = set(sys.modules)
start = time.perf_counter()
ok = ip.run_cell({loader()!r}, silent=True).success
seconds = time.perf_counter() - start
data, _ = ip.display_formatter.format([1, 2.5, "x"])
print(json.dumps({{"ok": ok, "seconds": seconds, "keys": sorted(data),
                  "formatters": sorted(ip.display_formatter.formatters),
                  "new": sorted(set(sys.modules) - before)}}))
"""
    env = dict(os.environ, IPYTHONDIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    report = json.loads(out.splitlines()[-1])
    assert report["ok"], out
    assert {"e2b/data", "e2b/chart"} <= set(report["formatters"])
    heavy = [m for m in report["new"]
             if m.split(".")[0] in ("pandas", "matplotlib", "numpy", "PIL")]
    assert heavy == [], heavy
    assert report["keys"] == ["text/plain"], report["keys"]
    assert report["seconds"] < 0.5, report["seconds"]


# --- e2b/data ------------------------------------------------------------------


def test_dataframe_becomes_its_columns_as_json_lists(shell):
    frame = pd.DataFrame({
        "n": [1, 2, 3],
        "x": [0.5, np.nan, np.inf],
        "s": ["a", None, "c"],
        "t": pd.to_datetime(["2024-01-02", None, "2024-03-04 05:06:07"]),
        7: [True, False, True],
    }, index=["r1", "r2", "r3"])
    data = bundle(shell, frame)

    assert "text/html" in data and "text/plain" in data
    got = json.loads(json.dumps(data["e2b/data"], allow_nan=False))
    assert got == {
        "n": [1, 2, 3],
        "x": [0.5, None, None],  # NaN and infinity are not JSON
        "s": ["a", None, "c"],
        "t": ["2024-01-02T00:00:00", None, "2024-03-04T05:06:07"],
        "7": [True, False, True],
    }
    # The shape is E2B's: to_dict(orient="list"), index dropped.
    reference = frame.to_dict(orient="list")
    assert got["n"] == reference["n"] and got["s"] == reference["s"]


def test_other_objects_get_no_data(shell):
    for obj in (pd.Series([1, 2]), [1, 2], {"a": [1]}, 42, "text"):
        data = bundle(shell, obj)
        assert "text/plain" in data
        assert "e2b/data" not in data and "e2b/chart" not in data, obj


def test_frame_over_the_cell_bound_gets_html_but_no_data(shell):
    cells = private_module()["MAX_DATA_CELLS"]
    big = pd.DataFrame(np.zeros((cells // 10 + 1, 10)))
    data = bundle(shell, big)
    assert "text/html" in data
    assert "e2b/data" not in data
    small = pd.DataFrame(np.zeros((cells // 10, 10)))
    assert len(bundle(shell, small)["e2b/data"]) == 10


# --- e2b/chart: one chart per type ---------------------------------------------


def test_line_chart_carries_points_labels_and_units(shell):
    fig, ax = axes()
    x = [0, 1, 2, 3]
    ax.plot(x, [0, 1, 4, 9], label="squares")
    ax.plot(x, [3, 3, 3, 3])
    ax.plot([0, 3], [5, 5])  # a flat two-point series is data too
    ax.axhline(2)  # reference lines are not
    ax.axvline(1)
    ax.grid(True)
    ax.set_title("Growth")
    ax.set_xlabel("Time (s)")
    ax.set_ylabel("Distance [m]")

    chart = chart_of(shell, fig)
    assert isinstance(chart, charts.LineChart)
    assert (chart.title, chart.x_label, chart.y_label) == ("Growth", "Time (s)", "Distance [m]")
    assert (chart.x_unit, chart.y_unit) == ("s", "m")
    assert [e.label for e in chart.elements] == ["squares", "Line 1", "Line 2"]
    assert chart.elements[0].points == [(0, 0), (1, 1), (2, 4), (3, 9)]
    assert chart.elements[2].points == [(0, 5), (3, 5)]
    assert chart.x_scale == chart.y_scale == charts.ScaleType.LINEAR
    assert len(chart.x_ticks) == len(chart.x_tick_labels) > 1
    low, high = ax.get_xlim()
    assert all(low <= tick <= high for tick in chart.x_ticks)
    assert all(isinstance(label, str) for label in chart.y_tick_labels)


def test_datetime_x_axis_gives_iso_points_and_ticks(shell):
    fig, ax = axes()
    days = [datetime.datetime(2024, 1, 1) + datetime.timedelta(days=i) for i in range(5)]
    ax.plot(days, [1, 3, 2, 5, 4], label="python")
    ax.plot(np.array(days, dtype="datetime64[ns]"), [0, 1, 0, 1, 0], label="numpy")

    chart = chart_of(shell, fig)
    assert chart.x_scale == charts.ScaleType.DATETIME
    assert chart.y_scale == charts.ScaleType.LINEAR
    expected = [d.isoformat() for d in days]
    assert [x for x, _ in chart.elements[0].points] == expected
    assert [x for x, _ in chart.elements[1].points] == expected
    ticks = [datetime.datetime.fromisoformat(t) for t in chart.x_ticks]
    assert ticks and all(days[0] <= t.replace(tzinfo=None) <= days[-1] for t in ticks)


def test_category_hand_placed_and_log_scales(shell):
    fig, ax = axes()
    ax.plot(["mon", "tue", "wed"], [3, 1, 2])
    chart = chart_of(shell, fig)
    assert chart.x_scale == charts.ScaleType.CATEGORICAL
    assert chart.x_tick_labels == ["mon", "tue", "wed"]
    assert chart.elements[0].points == [("mon", 3), ("tue", 1), ("wed", 2)]

    fig, ax = axes()
    ax.plot([0, 1, 2], [10, 100, 1000])
    ax.set_xticks([0, 1, 2], ["low", "mid", "high"])
    ax.set_yscale("log")
    chart = chart_of(shell, fig)
    assert chart.x_scale == charts.ScaleType.CATEGORICAL
    assert chart.y_scale == charts.ScaleType.LOG


def test_scatter_points_are_the_offsets(shell):
    fig, ax = axes()
    ax.scatter([0.5, 1.5, 2.5], [3.0, 1.0, 2.0], label="Dataset 1")
    ax.scatter([4.0], [4.5])
    ax.set_xlabel("A")

    chart = chart_of(shell, fig)
    assert isinstance(chart, charts.ScatterChart)
    assert chart.x_label == "A" and chart.y_label is None
    assert [e.label for e in chart.elements] == ["Dataset 1", "Series 1"]
    assert chart.elements[0].points == [(0.5, 3.0), (1.5, 1.0), (2.5, 2.0)]
    assert chart.elements[1].points == [(4.0, 4.5)]


def test_bars_have_labels_groups_and_values(shell):
    fig, ax = axes()
    ax.bar(["Author A", "Author B"], [300, 300], label="Books Sold")  # equal heights
    ax.set_xlabel("Authors")
    ax.set_ylabel("Books")
    chart = chart_of(shell, fig)
    assert isinstance(chart, charts.BarChart)
    assert [(b.label, b.group, b.value) for b in chart.elements] == [
        ("Author A", "Books Sold", 300), ("Author B", "Books Sold", 300)]
    assert (chart.x_label, chart.y_label) == ("Authors", "Books")

    fig, ax = axes()
    x = np.arange(3)
    ax.bar(x - 0.2, [1, 2, 3], 0.4, label="2023")
    ax.bar(x + 0.2, [3, -2, 1], 0.4)
    ax.set_xticks(x, ["p", "q", "r"])
    chart = chart_of(shell, fig)
    assert [(b.label, b.group, b.value) for b in chart.elements] == [
        ("p", "2023", 1), ("q", "2023", 2), ("r", "2023", 3),
        ("p", "Group 1", 3), ("q", "Group 1", -2), ("r", "Group 1", 1)]

    fig, ax = axes()
    ax.bar([1, 2.5], [4, 5])  # automatic ticks do not name bars
    chart = chart_of(shell, fig)
    assert [(b.label, b.value) for b in chart.elements] == [("1", 4), ("2.5", 5)]


def test_horizontal_bars_name_the_category_axis_x(shell):
    fig, ax = axes()
    ax.barh(["low", "high"], [5, 7])
    ax.set_xlabel("Count (n)")
    ax.set_ylabel("Level")
    chart = chart_of(shell, fig)
    assert [(b.label, b.value) for b in chart.elements] == [("low", 5), ("high", 7)]
    assert (chart.x_label, chart.y_label, chart.y_unit) == ("Level", "Count (n)", "n")


def test_pie_wedges_have_labels_and_angles(shell):
    fig, ax = axes()
    ax.pie([3, 1, 4, 2], labels=["a", "b", "c", "d"], autopct="%1.0f%%")
    ax.set_title("Share")
    chart = chart_of(shell, fig)
    assert isinstance(chart, charts.PieChart)
    assert chart.title == "Share"
    assert [w.label for w in chart.elements] == ["a", "b", "c", "d"]
    assert [w.angle for w in chart.elements] == pytest.approx([108, 36, 144, 72], abs=1e-3)
    assert sum(w.angle for w in chart.elements) == pytest.approx(360, abs=1e-3)
    assert {w.radius for w in chart.elements} == {1}


def box_reference(values):
    """What matplotlib's box plot draws: quartiles, 1.5 IQR whiskers, fliers."""
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    reach = 1.5 * (q3 - q1)
    inside = [v for v in values if q1 - reach <= v <= q3 + reach]
    return {"min": min(inside), "first_quartile": q1, "median": median,
            "third_quartile": q3, "max": max(inside),
            "outliers": [v for v in values if v not in inside]}


def assert_box(element, values):
    expected = box_reference(values)
    outliers = expected.pop("outliers")
    assert {k: getattr(element, k) for k in expected} == pytest.approx(expected)
    assert sorted(element.outliers) == pytest.approx(sorted(outliers))


def test_box_and_whisker_matches_numpy(shell):
    a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 40.0, -30.0]
    b = [12.5, 14.0, 15.5, 13.0, 19.0, 11.0]
    fig, ax = axes()
    ax.boxplot([a, b], patch_artist=True)
    ax.set_xticklabels(["A", "B"])
    ax.set_xlabel("Class")
    ax.set_ylabel("Score (pts)")
    chart = chart_of(shell, fig)
    assert isinstance(chart, charts.BoxAndWhiskerChart)
    assert [e.label for e in chart.elements] == ["A", "B"]
    assert_box(chart.elements[0], a)
    assert_box(chart.elements[1], b)
    assert sorted(chart.elements[0].outliers) == [-30.0, 40.0]
    assert (chart.x_label, chart.y_unit) == ("Class", "pts")

    # One box lying down: the value axis is x, so the labels swap.
    fig, ax = axes()
    ax.boxplot([b], vert=False, patch_artist=True, showmeans=True)
    ax.set_xlabel("Score")
    ax.set_ylabel("Class")
    chart = chart_of(shell, fig)
    assert_box(chart.elements[0], b)
    assert (chart.x_label, chart.y_label) == ("Class", "Score")


def test_two_axes_make_a_superchart(shell):
    fig = Figure()
    left, right = fig.subplots(1, 2)
    fig.suptitle("Overview")
    left.plot([1, 2, 3], [1, 4, 9])
    left.set_title("Line")
    right.bar(["x", "y"], [2, 5])
    right.set_title("Bars")

    chart = chart_of(shell, fig)
    assert isinstance(chart, charts.SuperChart)
    assert chart.title == "Overview"
    assert [type(c) for c in chart.elements] == [charts.LineChart, charts.BarChart]
    assert [c.title for c in chart.elements] == ["Line", "Bars"]
    assert chart.elements[0].elements[0].points == [(1, 1), (2, 4), (3, 9)]
    assert [b.value for b in chart.elements[1].elements] == [2, 5]


def test_image_is_an_unknown_chart_and_a_blank_figure_none(shell):
    fig, ax = axes()
    ax.imshow(np.arange(12).reshape(3, 4))
    ax.set_title("Pixels")
    chart = chart_of(shell, fig)
    assert type(chart) is charts.Chart
    assert (chart.type, chart.title, chart.elements) == (charts.ChartType.UNKNOWN, "Pixels", [])

    fig = Figure()
    fig.add_subplot(projection="polar").plot([0, 1], [1, 2])
    assert chart_of(shell, fig).type == charts.ChartType.UNKNOWN

    fig, ax = axes()
    data = bundle(shell, fig)
    assert "image/png" in data and "e2b/chart" not in data


def test_failed_extraction_keeps_the_rest_of_the_display(shell, monkeypatch):
    tracebacks = []
    monkeypatch.setattr(shell, "showtraceback", lambda *a, **k: tracebacks.append(a))

    fig, ax = axes()
    ax.plot([1, 2, 3])

    def broken():
        raise RuntimeError("no label today")

    ax.get_xlabel = broken
    data = bundle(shell, fig)
    assert "image/png" in data and "text/plain" in data
    assert "e2b/chart" not in data

    class BrokenFrame(pd.DataFrame):
        def items(self):
            raise RuntimeError("no columns today")

    data = bundle(shell, BrokenFrame({"a": [1]}))
    assert "text/html" in data and "text/plain" in data
    assert "e2b/data" not in data
    assert tracebacks == []  # a kernel would have sent these as errors


# --- a real kernel -----------------------------------------------------------------


class Kernel:
    def __init__(self, client):
        self.client = client

    def run(self, code, silent=False):
        """Outputs of one execution (display, result, stream and error)."""
        outputs = []
        reply = self.client.execute_interactive(code, silent=silent, store_history=False,
                                                timeout=60, output_hook=outputs.append)
        assert reply["content"]["status"] == "ok", reply["content"]
        return [m for m in outputs
                if m["msg_type"] in ("display_data", "execute_result", "stream", "error")]

    def displays(self, code):
        outputs = self.run(code)
        assert not [m for m in outputs if m["msg_type"] in ("error", "stream")], outputs
        return [m["content"]["data"] for m in outputs]

    def probe(self):
        """User-visible names and which heavy modules the kernel holds."""
        out = self.run("print(__import__('json').dumps([sorted(k for k in globals() "
                       "if not k.startswith('_')), [m for m in ('pandas', 'matplotlib', "
                       "'numpy') if m in __import__('sys').modules]]))")
        return json.loads(out[-1]["content"]["text"])


@pytest.fixture(scope="module")
def ipkernel(tmp_path_factory):
    manager = pytest.importorskip("jupyter_client.manager")
    tmp = tmp_path_factory.mktemp("kernel")
    env = dict(os.environ, IPYTHONDIR=str(tmp / "ipython"),
               JUPYTER_RUNTIME_DIR=str(tmp / "runtime"), PYDEVD_DISABLE_FILE_VALIDATION="1")
    env.pop("MPLBACKEND", None)  # the kernel picks the inline backend itself
    km = manager.KernelManager(kernel_name="python3", connection_file=str(tmp / "kernel.json"))
    km.start_kernel(env=env)
    client = km.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        k = Kernel(client)
        k.before = k.probe()
        k.load_outputs = k.run(loader(), silent=True)
        k.after = k.probe()
        yield k
    finally:
        client.stop_channels()
        km.shutdown_kernel(now=True)


def test_kernel_load_is_quiet_private_and_light(ipkernel):
    assert ipkernel.load_outputs == []
    assert ipkernel.after == ipkernel.before
    assert ipkernel.after[1] == []  # neither pandas, matplotlib nor numpy


def sdk_chart(data):
    """The chart the SDK's Result makes of a display bundle's e2b/chart."""
    return charts._deserialize_chart(data.get("e2b/chart"))


def test_kernel_pyplot_figures_carry_charts(ipkernel):
    # End of cell: the inline backend's post-execute flush displays the
    # figure, after configuring itself on this first import of pyplot.
    displays = ipkernel.displays("import matplotlib.pyplot as plt\n"
                               "plt.plot([1, 2, 3], [4, 5, 6], label='up')\n"
                               "plt.title('Rise')")
    figures = [d for d in displays if "image/png" in d]  # the other is Text(...)
    assert len(figures) == 1
    chart = sdk_chart(figures[0])
    assert isinstance(chart, charts.LineChart)
    assert chart.title == "Rise"
    assert chart.elements[0].points == [(1, 4), (2, 5), (3, 6)]

    displays = ipkernel.displays("fig, ax = plt.subplots()\nax.bar(['a', 'b'], [1, 2])\nplt.show()")
    assert [sdk_chart(d).type for d in displays] == [charts.ChartType.BAR]

    displays = ipkernel.displays("from IPython.display import display\n"
                               "fig2, ax2 = plt.subplots()\nax2.pie([1, 1], labels=['x', 'y'])\n"
                               "display(fig2)\nplt.close(fig2)")
    assert [[w.label for w in sdk_chart(d).elements] for d in displays] == [["x", "y"]]


def test_kernel_dataframe_result_is_strict_json(ipkernel):
    displays = ipkernel.displays("import pandas as pd\n"
                               "pd.DataFrame({'a': [1.5, float('nan')],"
                               " 'd': pd.to_datetime(['2024-05-06', None])})")
    assert len(displays) == 1 and "text/html" in displays[0]
    assert displays[0]["e2b/data"] == {"a": [1.5, None], "d": ["2024-05-06T00:00:00", None]}
    assert "e2b/data" not in ipkernel.displays("6 * 7")[0]


def test_kernel_broken_figure_still_shows(ipkernel):
    displays = ipkernel.displays("import matplotlib.pyplot as plt\n"
                               "from IPython.display import display\n"
                               "fig3, ax3 = plt.subplots()\nax3.plot([1, 2])\n"
                               "ax3.get_xlabel = lambda: 1 / 0\n"
                               "display(fig3)\nplt.close(fig3)")
    assert len(displays) == 1
    assert "image/png" in displays[0] and "text/plain" in displays[0]
    assert "e2b/chart" not in displays[0]


def test_kernel_pillow_show_and_save_display_the_image(ipkernel, tmp_path):
    """As in E2B's template: show() (no screen in a sandbox) and save() to a
    path display the image; a save to a file object (what a PNG for a
    display is made with) does not. Pillow is patched on its first import,
    in the cell that calls show()."""
    pytest.importorskip("PIL")
    outputs = ipkernel.run("from PIL import Image\n"
                           "im = Image.new('RGBA', (16, 16), 'red')\n"
                           "im.show()\nprint('shown')")
    assert [m["msg_type"] for m in outputs] == ["display_data", "stream"], outputs
    assert outputs[0]["content"]["data"]["image/png"]
    path = tmp_path / "saved.png"
    outputs = ipkernel.run(f"import io, pathlib\nim.save({str(path)!r})\n"
                           f"im.save(pathlib.Path({str(path)!r} + '.2.png'))\n"
                           "im.save(io.BytesIO(), 'PNG')")
    assert [m["msg_type"] for m in outputs] == ["display_data", "display_data"], outputs
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Loaded again (a restarted context is): still one display per call.
    ipkernel.run(loader(), silent=True)
    outputs = ipkernel.run("im.show()")
    assert [m["msg_type"] for m in outputs] == ["display_data"], outputs
