// The SAM template as a CDK app: the template is included as it is (one source of truth), and
// every function's CodeUri is replaced by one CDK asset, the multi-call binary's directory.
const path = require('path');
const cdk = require('aws-cdk-lib');
const { CfnInclude } = require('aws-cdk-lib/cloudformation-include');
const { Asset } = require('aws-cdk-lib/aws-s3-assets');

const repo = process.env.TCQ_REPO || path.join(__dirname, '..', '..');
const app = new cdk.App();
const stack = new cdk.Stack(app, process.env.TCQ_STACK || 'tcq');
const template = new CfnInclude(stack, 'Queue', {
  templateFile: path.join(repo, 'infra', 'template.yaml'),
});
// Built beforehand: cargo lambda build --release --arm64 --bin lambda (TCQ_LAMBDA_DIR: another
// directory, such as the test command's stand-in).
const codeDir = process.env.TCQ_LAMBDA_DIR || path.join(repo, 'target', 'lambda', 'lambda');
const code = new Asset(stack, 'Bootstrap', { path: codeDir });
let n = 0;
for (const child of template.node.children) {
  if (child.cfnResourceType === 'AWS::Serverless::Function') {
    child.codeUri = { bucket: code.s3BucketName, key: code.s3ObjectKey };
    // CDK's SAM schema wrongly requires OnSuccess next to OnFailure; an override is passed
    // on unchecked, as SAM accepts it.
    const eic = child.eventInvokeConfig;
    if (eic) {
      child.eventInvokeConfig = undefined;
      const onFailure = eic.destinationConfig.onFailure;
      child.addPropertyOverride('EventInvokeConfig', {
        MaximumRetryAttempts: eic.maximumRetryAttempts,
        DestinationConfig: { OnFailure: { Type: onFailure.type, Destination: onFailure.destination } },
      });
    }
    n += 1;
  }
}
console.error(`${n} functions use ${code.node.path}`);
