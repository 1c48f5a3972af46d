// conductor's launcher for the pi coding agent, run by node inside the
// sandbox (no network: only the sandbox's own loopback). It forwards
// 127.0.0.1:PORT to the run's model proxy socket (the only way out), starts
// pi with stdin from /dev/null, keeps pi's JSON events except the
// message_update / tool_execution_update snapshots (each repeats the whole
// message so far) in EVENTS, passes pi's stderr through, and exits as pi
// exits. It holds no credential: the proxy adds the key outside.
//
// usage: node pi_launch.mjs SOCKET PORT EVENTS PI_CLI [PI_ARGS...]
import fs from "node:fs";
import net from "node:net";
import { spawn } from "node:child_process";

const [socket, port, events, cli, ...args] = process.argv.slice(2);
const out = fs.openSync(events, "a");

const server = net.createServer((client) => {
  const upstream = net.connect(socket);
  client.pipe(upstream);
  upstream.pipe(client);
  client.on("error", () => upstream.destroy());
  upstream.on("error", () => client.destroy());
});
server.on("error", (err) => {
  process.stderr.write(`conductor pi launcher: forwarder: ${err.message}\n`);
  process.exit(70);
});
server.listen(Number(port), "127.0.0.1", () => {
  const child = spawn(process.execPath, [cli, ...args], { stdio: ["ignore", "pipe", "inherit"] });
  let rest = "";
  const keep = (line) => {
    if (line === "" || line.startsWith('{"type":"message_update"') || line.startsWith('{"type":"tool_execution_update"')) {
      return;
    }
    fs.writeSync(out, line + "\n");
  };
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (chunk) => {
    const lines = (rest + chunk).split("\n");
    rest = lines.pop();
    lines.forEach(keep);
  });
  child.on("error", (err) => {
    process.stderr.write(`conductor pi launcher: cannot start pi: ${err.message}\n`);
    process.exit(71);
  });
  child.on("close", (code, signal) => {
    keep(rest);
    fs.closeSync(out);
    process.exit(code ?? (signal ? 128 + (signal === "SIGKILL" ? 9 : 15) : 1));
  });
});
