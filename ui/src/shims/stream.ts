// `@hapi/b64` (under `hawk`) declares stream classes when loaded; the inspector never makes
// one, so a bare base class is enough.
export class Transform {}
export default { Transform };
