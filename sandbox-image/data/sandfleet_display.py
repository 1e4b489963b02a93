"""sandfleet's matplotlib backend: figures come back as display outputs.

MPLBACKEND=module://sandfleet_display (the data image's default) makes
plt.show() write each open figure, in the order of their numbers, as a PNG
into DISPLAY_DIR and close it, as a notebook does; fig.show() writes that
figure; and a figure still open when the program ends is written then (in
a session, at the end of each cell: end_cell, which the launcher's Python
context driver calls). The
launcher frames the directory's files back after the job, in name order,
bounded in count and bytes (launcher/display.go), and the result lists
them as display: [{"mime": "image/png", "data", "width", "height"}].

Rendering is Agg's, so savefig and everything else work as with
MPLBACKEND=Agg. Nothing here is trusted: a job may write anything into the
directory, and the executor only ever shows it.
"""

import atexit
import os

from matplotlib._pylab_helpers import Gcf
from matplotlib.backend_bases import FigureManagerBase, _Backend
from matplotlib.backends.backend_agg import FigureCanvasAgg, _BackendAgg

# The launcher reads this directory; keep the two in step.
DISPLAY_DIR = "/tmp/.sandfleet-display"

# The launcher frames at most this many; drawing more than it keeps would
# only spend the job's time, so past it figures are counted, not drawn.
MAX_FIGURES = 16

_count = 0
_shown = {}  # id(figure) -> the figure, for those shown and not changed since


def _emit(figure):
    global _count
    _count += 1
    if _count > MAX_FIGURES:
        # One empty file per figure past the cap: the launcher counts it
        # as dropped, and nothing is rendered.
        name = "%06d.png" % _count
        try:
            os.makedirs(DISPLAY_DIR, mode=0o700, exist_ok=True)
            open(os.path.join(DISPLAY_DIR, name), "wb").close()
        except OSError:
            pass
        return
    os.makedirs(DISPLAY_DIR, mode=0o700, exist_ok=True)
    path = os.path.join(DISPLAY_DIR, "%06d.png" % _count)
    figure.savefig(path, format="png")
    _shown[id(figure)] = figure


class FigureManagerSandfleet(FigureManagerBase):
    def show(self):
        _emit(self.canvas.figure)


class FigureCanvasSandfleet(FigureCanvasAgg):
    manager_class = FigureManagerSandfleet


@_Backend.export
class _BackendSandfleet(_BackendAgg):
    FigureCanvas = FigureCanvasSandfleet
    FigureManager = FigureManagerSandfleet

    @classmethod
    def show(cls, *, block=None):
        for manager in Gcf.get_all_fig_managers():
            _emit(manager.canvas.figure)
        Gcf.destroy_all()


def _at_exit():
    # A figure shown by fig.show() and not drawn on since is not written again.
    for manager in Gcf.get_all_fig_managers():
        figure = manager.canvas.figure
        if _shown.get(id(figure)) is figure and not figure.stale:
            continue
        try:
            _emit(figure)
        except Exception:
            pass


def end_cell():
    """The end of a session's cell: what is still open is shown and
    closed, as a notebook's inline backend does, and the next cell's
    bound starts afresh (the launcher collects each cell's outputs)."""
    global _count
    _at_exit()
    Gcf.destroy_all()
    _shown.clear()
    _count = 0


# Registered after pyplot's own Gcf.destroy_all (atexit runs the last
# registered first), so the figures are still there.
atexit.register(_at_exit)
