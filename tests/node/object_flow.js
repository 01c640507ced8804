// Object uploads and downloads with the official npm client's helpers (`taskcluster-client`:
// `upload`, `download`, `downloadArtifact`), run by tests/tests/blackbox/objects.rs against a
// spawned server:
// 1. for each size in SIZES: `upload` to the object service as root, then `download` (which
//    checks the hashes the service returns);
// 2. a worker: claimWork; for each size, createArtifact `object` with the claim's
//    credentials, `upload` with the credentials and uploadId createArtifact returned,
//    finishArtifact; reportCompleted; then `downloadArtifact` of each as root, for the latest
//    run and for run 0.
// Environment: TASKCLUSTER_ROOT_URL, TASKCLUSTER_CLIENT_ID / TASKCLUSTER_ACCESS_TOKEN (root),
// TASK_QUEUE_ID, SIZES (comma-separated), PREFIX. Prints one JSON line: the sha256 of what
// was sent and of what came back; exits non-zero on any failure.
const crypto = require('crypto');
const { Readable, Writable } = require('stream');
const taskcluster = require('taskcluster-client');

const rootUrl = process.env.TASKCLUSTER_ROOT_URL;
const tq = process.env.TASK_QUEUE_ID;
const prefix = process.env.PREFIX;
const sizes = process.env.SIZES.split(',').map(Number);
const root = {
  clientId: process.env.TASKCLUSTER_CLIENT_ID,
  accessToken: process.env.TASKCLUSTER_ACCESS_TOKEN,
};
const rootObject = new taskcluster.Object({ rootUrl, credentials: root, retries: 0 });
const rootQueue = new taskcluster.Queue({ rootUrl, credentials: root, retries: 0 });

// Not compressible, not repetitive: a hash chain.
const dataOf = (size, seed) => {
  const out = [];
  let block = Buffer.from(seed);
  let len = 0;
  while (len < size) {
    block = crypto.createHash('sha512').update(block).digest();
    out.push(block);
    len += block.length;
  }
  return Buffer.concat(out).subarray(0, size);
};
const sha = b => crypto.createHash('sha256').update(b).digest('hex');

// A writer factory that collects what it is given (fresh on every attempt).
const collector = () => {
  let chunks = [];
  const streamFactory = async () => {
    chunks = [];
    return new Writable({ write(chunk, _, cb) { chunks.push(chunk); cb(); } });
  };
  return { streamFactory, bytes: () => Buffer.concat(chunks) };
};

const main = async () => {
  const result = { objects: {}, artifacts: {} };
  const expires = taskcluster.fromNow('1 day');
  for (const size of sizes) {
    const data = dataOf(size, `node-object-${size}`);
    const name = `${prefix}/${size}.bin`;
    await taskcluster.upload({
      projectId: 'node-project', name, contentType: 'application/x-test',
      contentLength: data.length, expires, object: rootObject,
      streamFactory: async () => Readable.from([data]), retries: 0,
    });
    const got = collector();
    const contentType = await taskcluster.download({
      name, object: rootObject, streamFactory: got.streamFactory, retries: 0,
    });
    result.objects[size] = { sent: sha(data), got: sha(got.bytes()), contentType };
  }

  const taskId = taskcluster.slugid();
  await rootQueue.createTask(taskId, {
    taskQueueId: tq,
    created: new Date().toJSON(),
    deadline: taskcluster.fromNowJSON('1 hour'),
    payload: {},
    metadata: { name: 'node objects', description: 'node objects', owner: 'tests@example.com',
      source: 'https://example.com/tests' },
  });
  const claims = (await rootQueue.claimWork(tq, {
    workerGroup: 'node', workerId: 'w1', tasks: 1,
  })).tasks;
  if (claims.length !== 1) {
    throw new Error(`claimed ${claims.length}`);
  }
  const worker = new taskcluster.Queue({ rootUrl, credentials: claims[0].credentials, retries: 0 });
  for (const size of sizes) {
    const artifact = `public/build/${size}.bin`;
    const data = dataOf(size, `node-artifact-${size}`);
    const created = await worker.createArtifact(taskId, '0', artifact, {
      storageType: 'object', expires: expires.toJSON(), contentType: 'application/x-test',
    });
    const uploader = new taskcluster.Object({ rootUrl, credentials: created.credentials, retries: 0 });
    await taskcluster.upload({
      projectId: created.projectId, name: created.name, contentType: 'application/x-test',
      contentLength: data.length, expires: new Date(created.expires), object: uploader,
      uploadId: created.uploadId, streamFactory: async () => Readable.from([data]), retries: 0,
    });
    await worker.finishArtifact(taskId, '0', artifact, { uploadId: created.uploadId });
    result.artifacts[size] = { name: artifact, objectName: created.name, sent: sha(data) };
  }
  await worker.reportCompleted(taskId, '0');
  result.taskId = taskId;
  for (const a of Object.values(result.artifacts)) {
    const latest = collector();
    await taskcluster.downloadArtifact({
      taskId, name: a.name, queue: rootQueue, streamFactory: latest.streamFactory, retries: 0,
    });
    const run0 = collector();
    a.contentType = await taskcluster.downloadArtifact({
      taskId, runId: 0, name: a.name, queue: rootQueue, streamFactory: run0.streamFactory,
      retries: 0,
    });
    a.latest = sha(latest.bytes());
    a.run0 = sha(run0.bytes());
  }
  console.log(JSON.stringify(result));
};

main().catch(err => {
  console.error(err);
  process.exit(1);
});
