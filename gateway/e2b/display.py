"""E2B's extra display formats for Glovebox's Python kernels.

E2B's code-interpreter kernel adds two MIME types to display data, and the
E2B SDK turns them into Result.data and Result.chart:

  e2b/data   a pandas DataFrame as {column: [value, ...]}, the shape of
             DataFrame.to_dict(orient="list"), timestamps as ISO strings;
  e2b/chart  a matplotlib Figure described as E2B's chart model (line,
             scatter, bar, pie, box_and_whisker, superchart or unknown),
             the shapes e2b_code_interpreter.charts._deserialize_chart reads.

It also makes Pillow's Image.show() and Image.save(path) display the
image in the cell, as E2B's template does (a sandbox has no screen), once
Pillow is imported.

This is an IPython extension, written from scratch after E2B's behaviour.
The gateway (gateway/e2b/display.c) loads it in every E2B Python context
with the user expression of a silent execute_request (evaluated as it is,
not through IPython's input transforms, which cost about as much again as
the compiling), keeping its names out of the user's namespace:

    (lambda ns: (exec(compile(SOURCE, 'glovebox/e2b_display.py', 'exec'), ns),
                 ns['load_ipython_extension'](get_ipython())))(
        {'__name__': 'glovebox_e2b_display'})

where SOURCE is this file as a JSON string, which is also a Python string
literal. Loading takes 8 to 12 ms of CPU on a 2-core machine of 2026
(compiling 5 to 7, running load_ipython_extension 2 to 4) and imports
nothing heavy: the formatters know their classes by module and name, so a kernel
that never imports pandas or matplotlib never pays for them. Loading twice
just replaces the two formatters with equal ones.

A display must never break because of this file: every extraction error is
swallowed (with its warnings) and the format is simply left out, so the
PNG, HTML and text of the same display still reach the client.
"""

import datetime
import importlib.machinery
import math
import os
import re
import sys
import warnings

from IPython.core.formatters import BaseFormatter
from traitlets import ObjectName, Unicode

# Bounds on what one display may carry. Past them the format is left out
# rather than truncated, since a partial table or chart would read as the
# whole one, and the gateway relays no message over its max-message-bytes.
MAX_DATA_CELLS = 1_000_000
MAX_CHART_POINTS = 1_000_000

# "Time (s)" and "Distance [m]" carry units, as in E2B; "f(x)" does not.
_UNIT = re.compile(r"\s(?:\(([^()]*)\)|\[([^\[\]]*)\])")


def _plain(value):
    """Returns value as something json.dumps writes as standard JSON.

    Dates become ISO strings, numpy scalars Python ones, and NaN, infinity
    and NaT become null: the message packer refuses NaN, and the gateway and
    clients parse strict JSON. Anything else unknown becomes its str().
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):  # numpy.float64 included
        return float(value) if math.isfinite(value) else None
    if isinstance(value, (datetime.date, datetime.time)):
        # pandas.Timestamp is a datetime; NaT is the one unequal to itself.
        return value.isoformat() if value == value else None
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.generic):
        if isinstance(value, numpy.datetime64):
            if numpy.isnat(value):
                return None
            # Microseconds give a datetime that fromisoformat() reads back;
            # years past 9999 come back as an int, kept as numpy's text.
            moment = value.astype("datetime64[us]").item()
            if isinstance(moment, datetime.datetime):
                return moment.isoformat()
            return str(value)
        return _plain(value.item())
    pandas = sys.modules.get("pandas")
    if pandas is not None and value is pandas.NA:
        return None
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return str(value)


def _frame_data(frame):
    """e2b/data of a DataFrame: {column label: [cell, ...]}.

    E2B sends frame.to_dict(orient="list"); walking the columns gives the
    same shape (the index is dropped, a repeated label keeps its last
    column) without the warning to_dict prints for repeated labels.
    """
    if frame.size > MAX_DATA_CELLS:
        return None
    data = {}
    for label, column in frame.items():
        key = label if isinstance(label, str) else str(label)
        data[key] = [_plain(cell) for cell in column.tolist()]
    return data


# --- charts -----------------------------------------------------------------


def _text(value):
    return value if value else None


def _axis_converter(axis):
    get = getattr(axis, "get_converter", None)  # matplotlib >= 3.10
    return get() if get else axis.converter


def _is_date_axis(axis):
    import matplotlib.dates

    converter = _axis_converter(axis)
    # _SwitchableDateConverter, which plt.plot(dates, ...) installs, is no
    # DateConverter subclass, hence the module test.
    return isinstance(converter, matplotlib.dates.DateConverter) or (
        type(converter).__module__ == "matplotlib.dates")


def _is_category_axis(axis):
    import matplotlib.category

    return isinstance(_axis_converter(axis), matplotlib.category.StrCategoryConverter)


def _axis_value(axis, number):
    """A position on an axis as a point value: ISO time on a date axis."""
    if _is_date_axis(axis):
        import matplotlib.dates

        return matplotlib.dates.num2date(number).isoformat()
    return _plain(number)


def _ticks(axis):
    """The ticks inside the view and the labels matplotlib draws for them.

    The labels are formatted from every tick before the view filter, as
    matplotlib does, because some formatters pick labels by tick index.
    """
    locations = [float(tick) for tick in axis.get_majorticklocs()]
    # str(): a FixedFormatter hands back whatever it was given, e.g. the
    # numpy positions of an unlabelled box plot.
    labels = [str(label) for label in axis.get_major_formatter().format_ticks(locations)]
    low, high = sorted(axis.get_view_interval())
    slack = (high - low) * 1e-9
    return [(tick, label) for tick, label in zip(locations, labels)
            if low - slack <= tick <= high + slack]


def _scale(axis, scale, ticks):
    if _is_date_axis(axis):
        return "datetime"
    if _is_category_axis(axis):
        return "categorical"
    if scale != "linear":
        return scale  # log, symlog, logit, function, ...: E2B's scale names
    # Ticks at 0..n-1 that carry words are categories placed by hand, e.g.
    # plt.xticks(range(3), ["a", "b", "c"]).
    if ticks and all(tick == i and label != str(i)
                     for i, (tick, label) in enumerate(ticks)):
        return "categorical"
    return "linear"


def _position_labels(axis, spans):
    """A label for each (center, half width) of a bar or box on axis.

    Ticks someone placed (categories, set_xticks, a box plot's positions)
    name the nearest bar; automatic ticks do not, so a bar at 2.5 under
    ticks 2 and 3 is labelled by its own position, "2.5".
    """
    import matplotlib.category
    import matplotlib.ticker

    placed = isinstance(axis.get_major_locator(),
                        (matplotlib.ticker.FixedLocator,
                         matplotlib.category.StrCategoryLocator))
    ticks = _ticks(axis) if placed else []
    labels = []
    for center, _ in spans:
        nearest = min(ticks, key=lambda tick: abs(tick[0] - center), default=None)
        if nearest is not None and nearest[1]:
            labels.append(nearest[1])
        elif _is_date_axis(axis):
            labels.append(_axis_value(axis, center))
        else:
            labels.append(f"{center:g}")
    return labels


def _chart(ax, kind):
    title = next((t for t in (ax.get_title(loc) for loc in ("center", "left", "right"))
                  if t), None)
    return {"type": kind, "title": title, "elements": []}


def _chart_2d(ax, kind):
    chart = _chart(ax, kind)
    for name, label in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())):
        unit = _UNIT.search(label)
        chart[name + "_label"] = _text(label)
        chart[name + "_unit"] = (unit.group(1) or unit.group(2)) if unit else None
    return chart


def _swap_axes(chart):
    """Bars and boxes name the category axis x, whichever way they lie."""
    for field in ("label", "unit"):
        chart["x_" + field], chart["y_" + field] = chart["y_" + field], chart["x_" + field]


def _data_lines(ax):
    # axhline, axvline and the like are drawn in axes coordinates on one
    # side; they mark a reference, not data, so they neither make a chart
    # "unknown" nor show up as a series.
    return [line for line in ax.lines if line.get_transform() == ax.transData]


def _point_chart(ax, kind):
    chart = _chart_2d(ax, kind)
    for name, axis, scale in (("x", ax.xaxis, ax.get_xscale()),
                              ("y", ax.yaxis, ax.get_yscale())):
        ticks = _ticks(axis)
        chart[name + "_ticks"] = [_axis_value(axis, tick) for tick, _ in ticks]
        chart[name + "_tick_labels"] = [label for _, label in ticks]
        chart[name + "_scale"] = _scale(axis, scale, ticks)

    if kind == "line":
        for i, line in enumerate(_data_lines(ax)):
            # The data as given (dates, category names), not as converted.
            points = zip(line.get_xdata(), line.get_ydata())
            chart["elements"].append({
                "label": _series_label(line, "Line", i),
                "points": [[_plain(x), _plain(y)] for x, y in points],
            })
    else:
        for i, collection in enumerate(ax.collections):
            points = collection.get_offsets()
            chart["elements"].append({
                "label": _series_label(collection, "Series", i),
                "points": [[_axis_value(ax.xaxis, x), _axis_value(ax.yaxis, y)]
                           for x, y in points],
            })
    return chart


def _series_label(artist, noun, index):
    # matplotlib names unlabelled artists "_child0", "_container1", ...
    label = artist.get_label()
    return f"{noun} {index}" if not label or label.startswith("_") else label


def _bar_chart(ax):
    import matplotlib.container

    chart = _chart_2d(ax, "bar")
    containers = [c for c in ax.containers
                  if isinstance(c, matplotlib.container.BarContainer)]
    horizontal = False
    for i, container in enumerate(containers):
        horizontal = getattr(container, "orientation", None) == "horizontal"
        if horizontal:
            spans = [(r.get_y() + r.get_height() / 2, abs(r.get_height()) / 2) for r in container]
            values = [r.get_width() for r in container]
        else:
            spans = [(r.get_x() + r.get_width() / 2, abs(r.get_width()) / 2) for r in container]
            values = [r.get_height() for r in container]
        labels = _position_labels(ax.yaxis if horizontal else ax.xaxis, spans)
        group = _series_label(container, "Group", i)
        chart["elements"] += [{"label": label, "group": group, "value": _plain(value)}
                              for label, value in zip(labels, values)]
    if horizontal:
        _swap_axes(chart)
    return chart


def _close(a, b):
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _box_stats(bounds, lines, vertical):
    """Reads one box of a box plot from the lines matplotlib drew for it.

    bounds is the box patch's (x0, x1), (y0, y1); lines are (points, markers
    only) pairs. The median is the line across the box, whiskers run from a
    quartile outwards, and marker-only points past the whiskers are the
    outliers (a mean marker sits inside them). None if no median crosses
    the box this way up, i.e. the plot lies the other way.
    """
    along, across = (0, 1) if vertical else (1, 0)
    low_edge, high_edge = bounds[along]
    q1, q3 = bounds[across]
    median, low, high, marks = None, q1, q3, []
    for points, markers_only in lines:
        position, value = points[:, along], points[:, across]
        if not len(position) or position.min() < low_edge - 1e-9 or \
                position.max() > high_edge + 1e-9:
            continue  # another box's line
        if markers_only:
            marks += value.tolist()
        elif len(position) != 2:
            continue
        elif value[0] == value[1] and q1 <= value[0] <= q3 and \
                _close(position.min(), low_edge) and _close(position.max(), high_edge):
            median = value[0]
        elif position[0] == position[1]:
            if _close(value.max(), q1):
                low = value.min()
            elif _close(value.min(), q3):
                high = value.max()
    if median is None:
        return None
    return {"min": float(low), "first_quartile": float(q1), "median": float(median),
            "third_quartile": float(q3), "max": float(high),
            "outliers": [float(v) for v in marks if v < low or v > high]}


def _box_chart(ax):
    chart = _chart_2d(ax, "box_and_whisker")
    lines = [(line.get_xydata(), str(line.get_linestyle()).strip().lower() in ("", "none"))
             for line in ax.lines]
    boxes = []
    for patch in ax.patches:
        vertices = patch.get_path().vertices
        boxes.append(list(zip(vertices.min(axis=0), vertices.max(axis=0))))
    for vertical in (True, False):
        stats = [_box_stats(box, lines, vertical) for box in boxes]
        if stats and all(stats):
            break
    else:
        return chart  # boxes that do not read as a box plot: no elements

    along = 0 if vertical else 1
    spans = [((box[along][0] + box[along][1]) / 2, (box[along][1] - box[along][0]) / 2)
             for box in boxes]
    labels = _position_labels(ax.xaxis if vertical else ax.yaxis, spans)
    chart["elements"] = [dict(label=label, **box) for label, box in zip(labels, stats)]
    if not vertical:
        _swap_axes(chart)
    return chart


def _pie_chart(ax):
    chart = _chart(ax, "pie")
    for wedge in ax.patches:
        # matplotlib < 3.8 computes pie angles in float32; four decimals of
        # a degree give back the 324 and 36 of a 90/10 split.
        chart["elements"].append({"label": wedge.get_label(),
                                  "angle": round(abs(wedge.theta2 - wedge.theta1), 4),
                                  "radius": float(wedge.r)})
    return chart


def _chart_type(ax):
    """E2B's rule: a chart type when every data artist is of its kind."""
    from matplotlib.collections import PathCollection
    from matplotlib.patches import PathPatch, Rectangle, Wedge

    if ax.name != "rectilinear" or ax.images or ax.tables or ax.artists:
        return "unknown"  # polar, 3-D, images, tables
    lines, patches, collections = _data_lines(ax), list(ax.patches), list(ax.collections)
    if not patches and not collections:
        return "line"
    if not patches and not lines and all(isinstance(c, PathCollection) for c in collections):
        return "scatter"
    if collections:
        return "unknown"
    if not lines and all(isinstance(p, Wedge) for p in patches):
        return "pie"
    if not lines and all(isinstance(p, Rectangle) for p in patches):
        return "bar"
    # Box plots draw whiskers, caps and medians as lines; only boxes drawn
    # as patches (patch_artist=True, seaborn) are told from a line chart.
    if all(isinstance(p, PathPatch) for p in patches):
        return "box_and_whisker"
    return "unknown"


def _axes_chart(ax):
    kind = _chart_type(ax)
    if kind in ("line", "scatter"):
        return _point_chart(ax, kind)
    if kind == "bar":
        return _bar_chart(ax)
    if kind == "pie":
        return _pie_chart(ax)
    if kind == "box_and_whisker":
        return _box_chart(ax)
    return _chart(ax, "unknown")


def _figure_chart(figure):
    """e2b/chart of a Figure; None for a blank or oversized one."""
    axes = figure.get_axes()
    if not any(ax.has_data() for ax in axes):
        return None
    points = sum(len(line.get_xdata()) for ax in axes for line in ax.lines) + \
        sum(len(c.get_offsets()) for ax in axes for c in ax.collections)
    if points > MAX_CHART_POINTS:
        return None
    if len(axes) == 1:
        return _axes_chart(axes[0])
    suptitle = getattr(figure, "_suptitle", None)  # get_suptitle() is 3.8+
    return {"type": "superchart",
            "title": _text(suptitle.get_text()) if suptitle else None,
            "elements": [_axes_chart(ax) for ax in axes]}


# --- formatters -------------------------------------------------------------


def _quietly(extract):
    """Wraps an extractor so that it can only add a format, never break one.

    BaseFormatter would show an extractor's exception as a traceback, which
    a kernel sends as an error; here it just means no e2b/* entry.
    """
    def printer(obj):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return extract(obj)
        except Exception:  # any failure leaves the display as it was
            return None
    return printer


class _ClassFormatter(BaseFormatter):
    """Formats the instances of one class, named rather than imported.

    The class is looked up in sys.modules at display time: a DataFrame or a
    Figure can only exist once its module is imported, so a kernel that
    never imports pandas or matplotlib pays a dict lookup per display. This
    is not for_type_by_name() because configuring matplotlib's inline
    backend, which a kernel does on the first import of pyplot, pops every
    formatter's Figure printer (select_figure_formats).
    """

    _return_type = (dict,)
    module_name = class_name = ""

    def __call__(self, obj):
        cls = getattr(sys.modules.get(self.module_name), self.class_name, None)
        try:
            ours = self.enabled and cls is not None and isinstance(obj, cls)
        except Exception:  # a proxy whose __class__ raises
            ours = False
        if ours:
            return self.extract(obj)
        # Printers registered with for_type() and _repr_e2b_*_() methods.
        return super().__call__(obj)


class E2BDataFormatter(_ClassFormatter):
    format_type = Unicode("e2b/data")
    # As in E2B, an object may describe itself with _repr_e2b_data_().
    print_method = ObjectName("_repr_e2b_data_")
    module_name, class_name = "pandas", "DataFrame"
    extract = staticmethod(_quietly(_frame_data))


class E2BChartFormatter(_ClassFormatter):
    format_type = Unicode("e2b/chart")
    print_method = ObjectName("_repr_e2b_chart_")
    module_name, class_name = "matplotlib.figure", "Figure"
    extract = staticmethod(_quietly(_figure_chart))


# --- Pillow ---------------------------------------------------------------------


def _display_image(image):
    """Shows image as a display of the cell; a failure only means no display."""
    try:
        from IPython.display import display
        display(image)
    except Exception:  # the image's own save or show must still happen
        pass


def _patch_pillow(module):
    """Makes Image.show() and Image.save(path) display the image.

    A sandbox has no screen, so show() would look for a viewer program and
    find none; E2B's template makes both calls show the image in the cell
    instead, and its SDK reads that PNG as a result. Saving to a file-like
    object is not displayed: that is how the image's own PNG for a display
    is made (_repr_png_), and how a program copies an image in memory.
    """
    cls = getattr(module, "Image", None)
    if cls is None or getattr(cls.save, "_glovebox_e2b", False):
        return
    save = cls.save

    def save_and_display(self, fp, format=None, **params):
        result = save(self, fp, format, **params)
        if isinstance(fp, (str, bytes, os.PathLike)):
            _display_image(self)
        return result

    def show(self, title=None):
        _display_image(self)

    for name, function in (("save", save_and_display), ("show", show)):
        function._glovebox_e2b = True
        function.__name__ = name
        function.__qualname__ = "Image." + name
        function.__doc__ = getattr(cls, name).__doc__
        setattr(cls, name, function)


class _PillowLoader:
    """Runs PIL.Image's own loader, then patches the fresh module."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        _patch_pillow(module)


class _PillowFinder:
    """Patches PIL.Image as it is first imported, whenever that is.

    Importing Pillow now would cost every context its import time; a hook
    on import costs nothing until then, and patches even a cell that imports
    Pillow and calls show() in the same breath.
    """

    _glovebox_e2b = True

    def find_spec(self, name, path=None, target=None):
        if name != "PIL.Image":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _PillowLoader(spec.loader)
        return spec


def _hook_pillow():
    """Patches PIL.Image now if it is imported, else when it is. A second
    load replaces the hook rather than adding one."""
    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "_glovebox_e2b", False)]
    module = sys.modules.get("PIL.Image")
    if module is not None:
        _patch_pillow(module)
    else:
        sys.meta_path.insert(0, _PillowFinder())


def load_ipython_extension(ip):
    """Adds the e2b/data and e2b/chart formatters to ip's display formatter,
    and makes Pillow's Image.show() and Image.save() display the image.

    Keyed by MIME type, so a second load replaces rather than duplicates.
    They come after image/png, so a figure is drawn (its ticks laid out)
    before its chart is read.
    """
    display = ip.display_formatter
    display.formatters["e2b/data"] = E2BDataFormatter(parent=display)
    display.formatters["e2b/chart"] = E2BChartFormatter(parent=display)
    _hook_pillow()
