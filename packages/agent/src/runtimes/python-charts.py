"""Chart and table data for a Python code context's display outputs (docs/code.md, docs/e2b.md).

Run once in each Python kernel at its start (python-bridge.py passes it to the kernel's
exec_lines). It adds two IPython display formats, which import neither matplotlib nor pandas before a cell
does:

- application/vnd.warren.chart+json: a matplotlib Figure's data (line, scatter, bar, pie, box and
  whisker, several axes as a "superchart"), in the shape `@e2b/code-interpreter` reads as
  `result.chart`;
- application/vnd.warren.data+json: a pandas DataFrame's columns (`to_dict(orient="list")`), which
  it reads as `result.data`.

The chart extraction follows E2B's e2b_charts package (e2b-dev/code-interpreter,
chart_data_extractor/, Copyright 2024 FoundryLabs, Inc., Apache License 2.0), rewritten without
pydantic: the same chart types, fields, orientation and scale rules.
"""
import math
import re
from datetime import date, datetime

from IPython import get_ipython
from IPython.core.formatters import BaseFormatter
from traitlets import ObjectName, Unicode

UNIT = re.compile(r'\s\((.*?)\)|\[(.*?)\]')


def _round(value):
    # Vertices and line ends of one box come from different sums; rounding makes them comparable.
    value = float(value)
    return value if not math.isfinite(value) else round(value, 8)


def _point(value):
    import numpy
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, numpy.datetime64):
        return str(value.astype('datetime64[s]'))
    if isinstance(value, (int, float, numpy.integer, numpy.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    return str(value)


def _text_or_none(text):
    return text if text else None


def _base(kind, ax):
    return {'type': kind, 'title': _text_or_none(ax.get_title()), 'elements': []}


def _two_d(kind, ax):
    chart = _base(kind, ax)
    chart['x_label'] = _text_or_none(ax.get_xlabel())
    chart['y_label'] = _text_or_none(ax.get_ylabel())
    for axis in ('x', 'y'):
        label, unit = chart[axis + '_label'], None
        if label:
            match = UNIT.search(label)
            if match:
                unit = match.group(1) or match.group(2)
        chart[axis + '_unit'] = unit
    return chart


def _swap_axes(chart):
    for a, b in (('x_label', 'y_label'), ('x_unit', 'y_unit')):
        chart[a], chart[b] = chart[b], chart[a]


def _is_date_converter(converter):
    try:
        import matplotlib.dates as mdates
        kinds = tuple(k for k in (getattr(mdates, '_SwitchableDateConverter', None), getattr(mdates, 'DateConverter', None),
                                  getattr(mdates, 'ConciseDateConverter', None)) if k is not None)
        return bool(kinds) and isinstance(converter, kinds)
    except Exception:
        return False


def _converter(axis):
    get = getattr(axis, 'get_converter', None)
    return get() if callable(get) else getattr(axis, 'converter', None)


def _ticks(converter, ticks):
    if _is_date_converter(converter):
        import matplotlib.dates as mdates
        return [mdates.num2date(tick).isoformat() for tick in ticks]
    return [_point(tick) for tick in ticks]


def _scale(converter, scale, ticks, labels):
    if _is_date_converter(converter):
        return 'datetime'
    if scale != 'linear':
        return scale
    # Ticks 0..n-1 whose labels are not those numbers: categories.
    for i, (tick, label) in enumerate(zip(ticks, labels)):
        if isinstance(tick, float) and tick == i and str(i) != label:
            continue
        return 'linear'
    return 'categorical'


def _point_chart(kind, ax):
    chart = _two_d(kind, ax)
    for axis_name, axis in (('x', ax.xaxis), ('y', ax.yaxis)):
        labels = [label.get_text() for label in (ax.get_xticklabels() if axis_name == 'x' else ax.get_yticklabels())]
        converter = _converter(axis)
        ticks = _ticks(converter, ax.get_xticks() if axis_name == 'x' else ax.get_yticks())
        chart[axis_name + '_ticks'] = ticks
        chart[axis_name + '_tick_labels'] = labels
        chart[axis_name + '_scale'] = _scale(converter, ax.get_xscale() if axis_name == 'x' else ax.get_yscale(), ticks, labels)
    return chart


def _is_grid_line(ax, line):
    # A line without a label of the user's that spans the whole axis at one value (axhline, axvline, grids).
    x, y = list(line.get_xdata()), list(line.get_ydata())
    if len(x) != 2 or not line.get_label().startswith('_'):
        return False
    try:
        return (x[0] == x[1] and list(y) == [0, 1]) or (y[0] == y[1] and list(x) == [0, 1])
    except Exception:
        return False


def _line_chart(ax):
    chart = _point_chart('line', ax)
    for line in ax.get_lines():
        if _is_grid_line(ax, line):
            continue
        label = line.get_label()
        if label.startswith('_child'):
            label = 'Line %s' % label[6:]
        chart['elements'].append({'label': label, 'points': [[_point(x), _point(y)] for x, y in zip(line.get_xdata(), line.get_ydata())]})
    return chart


def _scatter_chart(ax):
    chart = _point_chart('scatter', ax)
    for collection in ax.collections:
        chart['elements'].append({'label': collection.get_label(), 'points': [[_point(x), _point(y)] for x, y in collection.get_offsets()]})
    return chart


def _bar_chart(ax):
    chart = _two_d('bar', ax)
    swapped = False
    for container in ax.containers:
        group = container.get_label()
        if group.startswith('_container'):
            group = 'Group %s' % group[10:]
        heights = [rect.get_height() for rect in container]
        if heights and all(h == heights[0] for h in heights):
            # Bars of one height: horizontal bars (barh), whose values are their widths.
            if not swapped:
                _swap_axes(chart)
                swapped = True
            labels = [label.get_text() for label in ax.get_yticklabels()]
            values = [rect.get_width() for rect in container]
        else:
            labels = [label.get_text() for label in ax.get_xticklabels()]
            values = heights
        for label, value in zip(labels, values):
            chart['elements'].append({'label': label, 'group': group, 'value': _point(value)})
    return chart


def _pie_chart(ax):
    chart = _base('pie', ax)
    for wedge in ax.patches:
        chart['elements'].append({'label': wedge.get_label(), 'angle': abs(round(wedge.theta2 - wedge.theta1, 4)), 'radius': float(wedge.r)})
    return chart


def _box_chart(ax):
    chart = _two_d('box_and_whisker', ax)
    labels = [item.get_text() for item in ax.get_xticklabels()]
    boxes = []
    for label, box in zip(labels, ax.patches):
        vertices = box.get_path().vertices
        xs = [_round(v) for v in vertices[:, 0]]
        ys = [_round(v) for v in vertices[:, 1]]
        x, y = min(xs), min(ys)
        boxes.append({'x': x, 'y': y, 'label': label, 'width': _round(max(xs) - x), 'height': _round(max(ys) - y), 'outliers': []})
    if not boxes:
        return chart
    vertical = all(box['height'] == boxes[0]['height'] for box in boxes)
    if vertical:
        _swap_axes(chart)
        for box in boxes:
            box['x'], box['y'] = box['y'], box['x']
            box['width'], box['height'] = box['height'], box['width']
    for line in ax.lines:
        xdata = [_round(v) for v in line.get_xdata()]
        ydata = [_round(v) for v in line.get_ydata()]
        if vertical:
            xdata, ydata = ydata, xdata
        if len(xdata) == 1:
            for box in boxes:
                if box['x'] <= xdata[0] <= box['x'] + box['width']:
                    box['outliers'].append(ydata[0])
                    break
            continue
        if len(ydata) != 2:
            continue
        for box in boxes:
            if box['x'] <= xdata[0] <= xdata[1] <= box['x'] + box['width']:
                break
        else:
            continue
        if ydata[0] == ydata[1] and box['y'] <= ydata[0] <= box['y'] + box['height']:
            box['median'] = ydata[0]
            continue
        low, high = min(ydata), max(ydata)
        if high == box['y']:
            box['whisker_lower'] = low
        elif low == _round(box['y'] + box['height']):
            box['whisker_upper'] = high
    chart['elements'] = [{
        'label': box['label'],
        'min': box.get('whisker_lower', box['y']),
        'first_quartile': box['y'],
        'median': box.get('median'),
        'third_quartile': _round(box['y'] + box['height']),
        'max': box.get('whisker_upper', _round(box['y'] + box['height'])),
        'outliers': box['outliers'],
    } for box in boxes]
    return chart


def _kind(ax):
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch, Rectangle, Wedge
    from matplotlib.text import Text
    objects = [obj for obj in getattr(ax, '_children', []) if not isinstance(obj, Text)]
    if all(isinstance(obj, Line2D) for obj in objects):
        return 'line'
    if all(isinstance(obj, (PathPatch, Line2D)) for obj in objects):
        return 'box_and_whisker'
    objects = [obj for obj in objects if not (isinstance(obj, Line2D) and _is_grid_line(ax, obj))]
    if all(isinstance(obj, PathCollection) for obj in objects):
        return 'scatter'
    if all(isinstance(obj, Wedge) for obj in objects):
        return 'pie'
    if all(isinstance(obj, Rectangle) for obj in objects):
        return 'bar'
    return 'unknown'


def chart_of_axes(ax):
    kind = _kind(ax)
    make = {'line': _line_chart, 'scatter': _scatter_chart, 'bar': _bar_chart, 'pie': _pie_chart, 'box_and_whisker': _box_chart}.get(kind)
    return make(ax) if make else _base('unknown', ax)


def chart_of_figure(figure):
    """The chart data of a matplotlib Figure; None for a figure without axes or one that cannot be read."""
    try:
        axes = figure.get_axes()
        if not axes:
            return None
        if len(axes) == 1:
            return chart_of_axes(axes[0])
        suptitle = figure.get_suptitle() if hasattr(figure, 'get_suptitle') else (figure._suptitle.get_text() if figure._suptitle else '')
        return {'type': 'superchart', 'title': _text_or_none(suptitle), 'elements': [chart_of_axes(ax) for ax in axes]}
    except Exception:
        return None


def data_of_frame(frame):
    """A DataFrame's columns, each a list of JSON values (dates as ISO text); None when it cannot be read."""
    try:
        import json
        return {str(column): json.loads(frame[column].to_json(orient='values', date_format='iso', default_handler=str)) for column in frame.columns}
    except Exception:
        return None


class ChartFormatter(BaseFormatter):
    format_type = Unicode('application/vnd.warren.chart+json')
    print_method = ObjectName('_repr_warren_chart_')
    _return_type = (dict,)

    def __call__(self, obj):
        # Not a type printer: the inline backend's select_figure_formats removes Figure from
        # every formatter when it sets up, this one's entry with them.
        figure = getattr(__import__('sys').modules.get('matplotlib.figure'), 'Figure', None)
        if figure is not None and isinstance(obj, figure):
            return chart_of_figure(obj)
        return super().__call__(obj)


class DataFormatter(BaseFormatter):
    format_type = Unicode('application/vnd.warren.data+json')
    print_method = ObjectName('_repr_warren_data_')
    _return_type = (dict,)


def install():
    shell = get_ipython()
    if shell is None:
        return
    formatters = shell.display_formatter.formatters
    charts = ChartFormatter(parent=shell.display_formatter)
    formatters[charts.format_type] = charts
    data = DataFormatter(parent=shell.display_formatter)
    data.for_type_by_name('pandas.core.frame', 'DataFrame', data_of_frame)
    formatters[data.format_type] = data


install()
