// Brokers the relay tests talk to (NATS, RabbitMQ, Redis): whether one answers on its port. As
// for PostgreSQL, a test file whose broker is down is skipped with one loud line saying how to
// start it, and under CI (where .ci/run starts every broker) a broker that is down fails the run.

import { connect } from "node:net";

/** Whether a TCP connection to the URL's host and port opens within a second; the reason if not. */
function reachable(url: string): Promise<string | null> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect({ host: hostname, port: Number(port) });
    const done = (why: string | null) => {
      socket.destroy();
      resolve(why);
    };
    socket.setTimeout(1_000, () => done("no answer within 1 s"));
    socket.once("connect", () => done(null));
    socket.once("error", (error: NodeJS.ErrnoException) => done(error.code ?? error.message));
  });
}

/** True when the service answers; otherwise skips loudly, or throws under CI. */
export async function requireService(name: string, url: string, startCommand: string): Promise<boolean> {
  const why = await reachable(url);
  if (why === null) return true;
  const message = `${name} at ${url} is unreachable (${why}). Start it with: ${startCommand}`;
  if (process.env.CI) throw new Error(`CI is set, so ${name} tests must run: ${message}`);
  console.warn(`\n!!! SKIPPING ${name.toUpperCase()} TESTS: ${message}\n`);
  return false;
}

/** The NATS JetStream server the relay tests publish to (TEST_NATS_URL, or this machine's). */
export const TEST_NATS_URL = process.env.TEST_NATS_URL ?? "nats://127.0.0.1:4222";
/** The RabbitMQ server (TEST_AMQP_URL, or this machine's). */
export const TEST_AMQP_URL = process.env.TEST_AMQP_URL ?? "amqp://guest:guest@127.0.0.1:5672";
/** The Redis server (TEST_REDIS_URL, or this machine's). */
export const TEST_REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

/** requireService for TEST_NATS_URL. */
export function natsAvailable(): Promise<boolean> {
  return requireService(
    "NATS",
    TEST_NATS_URL,
    "start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server",
  );
}

/** requireService for TEST_AMQP_URL. */
export function rabbitAvailable(): Promise<boolean> {
  return requireService("RabbitMQ", TEST_AMQP_URL, "rabbitmq-server -detached");
}

/** requireService for TEST_REDIS_URL. */
export function redisAvailable(): Promise<boolean> {
  return requireService("Redis", TEST_REDIS_URL, 'redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no');
}
