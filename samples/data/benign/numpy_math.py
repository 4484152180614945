# name: numpy-math
# tries: array math with numpy (its BLAS and LAPACK), as an agent's analysis step does
# must: run it: numpy imports and computes
# expect: *=ok
# delivers: "numpy ok: det=-2.0 sum=45 mean=4.5 solved=True"
import numpy as np

a = np.arange(10)
m = np.array([[1.0, 2.0], [3.0, 4.0]])
det = round(float(np.linalg.det(m)), 6)
x = np.linalg.solve(m, np.array([5.0, 11.0]))
print(f"numpy ok: det={det} sum={a.sum()} mean={a.mean()} solved={bool(np.allclose(x, [1.0, 2.0]))}")
