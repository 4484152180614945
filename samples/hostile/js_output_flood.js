// name: js-output-flood
// tries: write to stdout as fast as it can, forever, with blocking writes (fs.writeSync on fd 1)
// must: stop reading at the output limit, kill the run and mark the output truncated
// expect: *=violation:output_limit
// A loop of process.stdout.write that never yields queues its writes in
// Node's memory once the pipe is full (the event loop never turns): that
// ends as a memory violation instead, so this one blocks on the pipe.
const fs = require('fs');
const line = Buffer.from(('flood '.repeat(10) + '\n').repeat(1000));
for (;;) fs.writeSync(1, line);
