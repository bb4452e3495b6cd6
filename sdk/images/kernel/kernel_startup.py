"""Run by every dockhand kernel at start (IPKernelApp.exec_files).

Adds two MIME types to what the kernel displays:
- application/vnd.dockhand.chart+json: a matplotlib figure as data (chart
  type, title, axis labels, elements with their values), beside its PNG;
- application/vnd.dockhand.dataframe+json: a pandas DataFrame's columns,
  index and rows (the first 1000), beside its HTML.
Both are registered lazily, so a kernel without pandas or matplotlib pays
nothing for them.
"""


def _dh_setup():
    import json
    import math

    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName, Unicode

    ip = get_ipython()
    if ip is None:
        return
    MAX_POINTS = 10000

    def plain(value):
        try:
            value = value.item()
        except AttributeError:
            pass
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, (int, float, str, bool)) or value is None:
            return value
        return str(value)

    def values(seq):
        out = []
        for i, v in enumerate(seq):
            if i >= MAX_POINTS:
                break
            out.append(plain(v))
        return out

    def axis_chart(ax):
        from matplotlib.collections import PathCollection
        from matplotlib.container import BarContainer
        from matplotlib.patches import Wedge

        base = {
            "title": ax.get_title(),
            "x_label": ax.get_xlabel(),
            "y_label": ax.get_ylabel(),
        }
        wedges = [p for p in ax.patches if isinstance(p, Wedge)]
        if wedges:
            labels = [t.get_text() for t in ax.texts]
            elements = []
            for i, w in enumerate(wedges):
                elements.append({"label": labels[i] if i < len(labels) else "", "angle": plain(w.theta2 - w.theta1),
                                 "radius": plain(w.r)})
            return dict(base, type="pie", elements=elements)
        bars = [c for c in ax.containers if isinstance(c, BarContainer)]
        if bars:
            ticks = [t.get_text() for t in ax.get_xticklabels()]
            elements = []
            for group in bars:
                for i, rect in enumerate(group.patches[:MAX_POINTS]):
                    elements.append({"label": ticks[i] if i < len(ticks) and ticks[i] else plain(rect.get_x() + rect.get_width() / 2),
                                     "group": group.get_label() if not str(group.get_label()).startswith("_") else "",
                                     "value": plain(rect.get_height())})
            return dict(base, type="bar", elements=elements)
        scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
        if scatters:
            elements = []
            for c in scatters:
                points = c.get_offsets()
                elements.append({"label": c.get_label() if not str(c.get_label()).startswith("_") else "",
                                 "points": [[plain(x), plain(y)] for x, y in list(points)[:MAX_POINTS]]})
            return dict(base, type="scatter", elements=elements)
        lines = ax.get_lines()
        if lines:
            elements = [{"label": line.get_label() if not str(line.get_label()).startswith("_") else "",
                         "x": values(line.get_xdata()), "y": values(line.get_ydata())} for line in lines]
            return dict(base, type="line", elements=elements)
        return dict(base, type="unknown", elements=[])

    def figure_chart(fig):
        axes = [axis_chart(ax) for ax in fig.axes if ax.get_visible()]
        if len(axes) == 1:
            chart = axes[0]
        else:
            chart = {"type": "composite", "title": fig._suptitle.get_text() if fig._suptitle else "", "elements": axes}
        return json.loads(json.dumps(chart, default=str))

    def frame_data(df):
        shown = df.head(1000)
        data = json.loads(shown.to_json(orient="split", date_format="iso", default_handler=str))
        data["shape"] = list(df.shape)
        data["truncated"] = len(df) > len(shown)
        return data

    class ChartFormatter(BaseFormatter):
        format_type = Unicode("application/vnd.dockhand.chart+json")
        print_method = ObjectName("_dockhand_chart_")
        _return_type = dict

    class FrameFormatter(BaseFormatter):
        format_type = Unicode("application/vnd.dockhand.dataframe+json")
        print_method = ObjectName("_dockhand_frame_")
        _return_type = dict

    display = ip.display_formatter
    # Registered by name, so nothing is imported until the user does; pandas
    # 3 names its class `pandas.DataFrame`, earlier ones `pandas.core.frame`.
    for formatter, modules, name, func in (
        (ChartFormatter, ("matplotlib.figure",), "Figure", figure_chart),
        (FrameFormatter, ("pandas", "pandas.core.frame"), "DataFrame", frame_data),
    ):
        instance = formatter(parent=display)
        for module in modules:
            instance.for_type_by_name(module, name, func)
        display.formatters[instance.format_type] = instance
        if instance.format_type not in display.active_types:
            display.active_types = list(display.active_types) + [instance.format_type]


_dh_setup()
del _dh_setup
