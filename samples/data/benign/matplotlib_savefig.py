# name: matplotlib-savefig
# tries: draw a chart with matplotlib (Agg) and save it as a PNG file in /work
# must: run it: matplotlib imports, draws and writes the file
# expect: *=ok
# delivers: "matplotlib ok: png=True"
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots()
ax.plot([1, 2, 3], [4, 1, 9])
fig.savefig("chart.png")
with open("chart.png", "rb") as f:
    png = f.read(8) == b"\x89PNG\r\n\x1a\n"
print(f"matplotlib ok: png={png and os.path.getsize('chart.png') > 1000}")
