"""Run by every dockhand kernel at start (IPKernelApp.exec_files).

Adds two MIME types to what the kernel displays:
- application/vnd.dockhand.chart+json: a matplotlib figure as data (chart
  type, title, axis labels, elements with their values), beside its PNG;
- application/vnd.dockhand.dataframe+json: a pandas DataFrame's columns,
  index and rows (the first 1000), beside its HTML.
Both are registered lazily, so a kernel without pandas or matplotlib pays
nothing for them.

And it keeps each run's output its own, and bounded where it is made:
- a thread's output belongs to the run that started it (an executor task's
  to the run that submitted it), so what threads a run left behind print or
  display later is dropped by the host, not taken for the later run's;
- printed text past the text limit and displays past a run's budget are
  dropped in the kernel, so a flood neither fills the kernel's buffers nor
  crosses the relay.
"""


def _dh_when_imported(target, patch):
    """Calls `patch(module)` once the module `target` is imported: now if it
    is, otherwise right after its code runs (it costs nothing before)."""
    import importlib.abc
    import importlib.util
    import sys

    if target in sys.modules:
        patch(sys.modules[target])
        return

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target_module=None):
            if name != target:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                patch(module)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Finder())


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
        # A masked point (pandas masks NaN in the lines it plots): nothing
        # there, not the 0.0 its `.item()` gives.
        if type(value).__name__ == "MaskedConstant":
            return None
        kind = getattr(getattr(value, "dtype", None), "kind", "")
        if kind == "M":
            # numpy's datetime64: `.item()` of nanoseconds is an integer.
            import numpy
            return None if numpy.isnat(value) else str(numpy.datetime_as_string(value))
        try:
            value = value.item()
        except (AttributeError, ValueError):
            pass
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, (int, float, str, bool)) or value is None:
            return value
        if hasattr(value, "isoformat"):
            # datetime, date, pandas' Timestamp (NaT is nothing).
            text = value.isoformat()
            return None if text == "NaT" else text
        return str(value)

    def converter_of(axis):
        try:
            return axis.get_converter()
        except AttributeError:
            return getattr(axis, "converter", None)

    def x_values(ax, line):
        """A line's x values as its axis shows them: dates as dates (pandas
        plots them as period ordinals or day numbers), a text index as its
        labels (pandas plots it at positions 0, 1, ...)."""
        xs = values(line.get_xdata())
        numbers = all(x is None or isinstance(x, (int, float)) for x in xs)
        if not numbers:
            return xs
        name = type(converter_of(ax.xaxis)).__name__
        freq = getattr(ax, "freq", None)
        if name == "PeriodConverter" and freq is not None:
            import pandas
            return [None if x is None else pandas.Period(ordinal=int(x), freq=freq).to_timestamp().isoformat()
                    for x in xs]
        if "Date" in name:
            from matplotlib.dates import num2date
            return [None if x is None else num2date(x).replace(tzinfo=None).isoformat() for x in xs]
        labels = getattr(ax, "_dockhand_index", None)
        if labels is not None and all(x is None or (float(x).is_integer() and 0 <= x < len(labels)) for x in xs):
            return [None if x is None else plain(labels[int(x)]) for x in xs]
        return xs

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
                         "x": x_values(ax, line), "y": values(line.get_ydata())} for line in lines]
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
    # A figure's chart is a method of the class instead: the inline backend
    # drops every formatter's entry for Figure as it starts, which happens
    # at the first plot when matplotlib is imported on first use.
    for formatter, modules, name, func in (
        (ChartFormatter, (), "Figure", figure_chart),
        (FrameFormatter, ("pandas", "pandas.core.frame"), "DataFrame", frame_data),
    ):
        instance = formatter(parent=display)
        for module in modules:
            instance.for_type_by_name(module, name, func)
        display.formatters[instance.format_type] = instance
        if instance.format_type not in display.active_types:
            display.active_types = list(display.active_types) + [instance.format_type]

    def chart_method(module):
        def _dockhand_chart_(self):
            return figure_chart(self)

        module.Figure._dockhand_chart_ = _dockhand_chart_

    _dh_when_imported("matplotlib.figure", chart_method)


def _dh_own_output():
    import concurrent.futures
    import os
    import sys
    import threading

    from IPython import get_ipython

    ip = get_ipython()
    if ip is None:
        return
    streams = [s for s in (sys.stdout, sys.stderr) if hasattr(s, "set_thread_parent")]
    publisher = getattr(ip, "display_pub", None)
    stamped = streams + ([publisher] if hasattr(publisher, "set_thread_parent") else [])
    if not streams:
        return

    def current():
        return streams[0].parent_header

    # A thread's run is also kept in a thread-local, which the streams and
    # the display publisher read first: their context variable alone was
    # seen, now and then, to give a left-behind thread the current run's
    # parent for one write.
    local = threading.local()
    for cls in {type(t) for t in stamped}:
        prop = getattr(cls, "parent_header", None)
        if not isinstance(prop, property):
            continue

        def getter(self, _get=prop.fget):
            parent = getattr(local, "parent", None)
            return parent if parent is not None else _get(self)

        setattr(cls, "parent_header", property(getter, prop.fset))

    def adopt(parent, fn):
        def run(*args, **kwargs):
            tokens = [(t, t.set_thread_parent(parent)) for t in stamped]
            local.parent = parent
            try:
                return fn(*args, **kwargs)
            finally:
                local.parent = None
                for t, token in reversed(tokens):
                    try:
                        t.reset_thread_parent(token)
                    except ValueError:
                        pass

        return run

    start = threading.Thread.start

    def start_in_this_run(self, *args, **kwargs):
        self.run = adopt(current(), self.run)
        return start(self, *args, **kwargs)

    threading.Thread.start = start_in_this_run
    submit = concurrent.futures.ThreadPoolExecutor.submit

    def submit_in_this_run(self, fn, /, *args, **kwargs):
        return submit(self, adopt(current(), fn), *args, **kwargs)

    concurrent.futures.ThreadPoolExecutor.submit = submit_in_this_run

    text_limit = int(os.environ.get("DOCKHAND_TEXT_LIMIT") or 0)
    payload_limit = int(os.environ.get("DOCKHAND_PAYLOAD_LIMIT") or (8 << 20))
    max_displays = int(os.environ.get("DOCKHAND_MAX_DISPLAYS") or 500)
    display_budget = 4 * payload_limit
    # By run (the parent's msg_id); a run's count starts afresh with it.
    used = {}
    ip.events.register("pre_run_cell", lambda *_: used.clear())

    def run_of(stream):
        return (stream.parent_header or {}).get("msg_id")

    if text_limit > 0:
        for stream in streams:
            write = stream.write

            # One character past the limit goes on, so the relay sees the
            # stream was cut; the rest never leaves the kernel.
            def capped(text, _write=write, _name=stream.name, _stream=stream):
                if not isinstance(text, str):
                    return _write(text)
                key = (_name, run_of(_stream))
                before = used.get(key, 0)
                room = text_limit + 1 - before
                if room <= 0:
                    return len(text)
                used[key] = before + min(len(text), room)
                if len(text) > room:
                    _write(text[:room])
                    return len(text)
                return _write(text)

            stream.write = capped

    if publisher is not None:
        publish = publisher.publish
        note = sys.stderr.write

        def bounded(data, metadata=None, *args, **kwargs):
            key = ("display", run_of(streams[0]))
            count, size = used.get(key, (0, 0))
            size += sum(len(v) if isinstance(v, (str, bytes)) else 64 for v in (data or {}).values())
            count += 1
            used[key] = (count, size)
            if count > max_displays or size > display_budget:
                if not used.get(key + ("noted",)):
                    used[key + ("noted",)] = True
                    note(
                        "[dockhand: this run's further displays are dropped: past %d displays or %d bytes]\n"
                        % (max_displays, display_budget)
                    )
                return None
            return publish(data, metadata, *args, **kwargs)

        publisher.publish = bounded


def _dh_no_tcp_listener():
    # ipykernel listens on loopback TCP for the output of forked children
    # (its IOPub pipe). gVisor cannot save a TCP endpoint, so a kernel with
    # that listener could not be paused with its memory: the pipe is closed
    # (on the IOPub thread, which owns it). Forked children then write to
    # IOPub directly, as when ipykernel cannot bind the pipe at all;
    # subprocesses' pipes are unaffected.
    try:
        from ipykernel.kernelapp import IPKernelApp

        thread = IPKernelApp.instance().iopub_thread
        stream = getattr(thread, "_pipe_in", None)
        if getattr(thread, "_pipe_flag", False) and stream is not None:
            thread._pipe_flag = False
            thread.io_loop.add_callback(stream.close)
    except Exception:
        pass


def _dh_fast_flush():
    # ipykernel flushes stdout and stderr six times a run (display hook,
    # reply, dispatch), each a round trip to its IOPub thread even with
    # nothing written: most of a `1 + 1`. A flush with nothing buffered and
    # none pending has nothing to send, and returns at once; one with
    # output waits as before, so output still comes before the reply.
    try:
        from ipykernel.iostream import OutStream
    except Exception:
        return
    original = OutStream.flush
    if getattr(original, "_dockhand", False):
        return

    def flush(self):
        if (
            not getattr(self, "_buffers", True)
            and not getattr(self, "_flush_pending", True)
            and not getattr(self, "_subprocess_flush_pending", True)
        ):
            return None
        return original(self)

    flush._dockhand = True
    OutStream.flush = flush


def _dh_keep_text_index():
    # pandas plots a line over a text index at positions 0, 1, ... and
    # labels only the ticks it shows: the index is kept on the axes, so the
    # chart's data says which category each point is.
    def patch(module):
        line = getattr(module, "LinePlot", None)
        original = getattr(line, "_post_plot_logic", None)
        if original is None or getattr(original, "_dockhand", False):
            return

        def post_plot_logic(self, ax, data):
            if getattr(self, "_need_to_set_index", False):
                try:
                    ax._dockhand_index = list(data.index)
                except Exception:
                    pass
            return original(self, ax, data)

        post_plot_logic._dockhand = True
        line._post_plot_logic = post_plot_logic

    _dh_when_imported("pandas.plotting._matplotlib.core", patch)


_dh_setup()
_dh_own_output()
_dh_no_tcp_listener()
_dh_keep_text_index()
_dh_fast_flush()
del _dh_setup, _dh_own_output, _dh_no_tcp_listener, _dh_keep_text_index, _dh_fast_flush, _dh_when_imported
