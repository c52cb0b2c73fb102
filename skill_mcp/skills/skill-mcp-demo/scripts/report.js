// Report what this script was handed: argv, working directory, variable names, interpreter.
console.log(
  JSON.stringify({
    argv: process.argv.slice(2),
    cwd: process.cwd(),
    envNames: Object.keys(process.env).sort(),
    interpreter: `Node ${process.version}`,
    executable: process.execPath,
  })
);
console.error("report.js finished");
