// The API's shapes, as far as the pages read them.
export interface Run {
  runId: number;
  state: string;
  reasonCreated: string;
  reasonResolved?: string;
  workerGroup?: string;
  workerId?: string;
  takenUntil?: string;
  scheduled: string;
  started?: string;
  resolved?: string;
}

export interface Status {
  taskId: string;
  provisionerId?: string;
  workerType?: string;
  taskQueueId: string;
  schedulerId: string;
  projectId?: string;
  taskGroupId: string;
  deadline: string;
  expires: string;
  retriesLeft: number;
  state: string;
  runs: Run[];
}

export interface TaskDef {
  taskQueueId?: string;
  provisionerId?: string;
  workerType?: string;
  schedulerId: string;
  projectId?: string;
  taskGroupId: string;
  dependencies: string[];
  requires?: string;
  routes?: string[];
  priority?: string;
  retries?: number;
  created: string;
  deadline: string;
  expires?: string;
  scopes?: string[];
  payload: unknown;
  metadata: { name: string; description: string; owner: string; source: string };
  tags?: Record<string, string>;
  extra?: unknown;
}

export interface TaskAndStatus {
  status: Status;
  task: TaskDef;
}

export interface Artifact {
  name: string;
  storageType: string;
  contentType: string;
  expires: string;
}
