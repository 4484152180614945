# name: pandas-csv
# tries: a pandas DataFrame from a CSV file the program wrote in /work, grouped and summed
# must: run it: pandas imports and reads the file
# expect: *=ok
# delivers: "pandas ok: rows=3 north=7 south=5"
import pandas as pd

with open("sales.csv", "w") as f:
    f.write("region,units\nnorth,3\nsouth,5\nnorth,4\n")
df = pd.read_csv("sales.csv")
units = df.groupby("region")["units"].sum()
print(f"pandas ok: rows={len(df)} north={units['north']} south={units['south']}")
