// The provisioning module's functions register here.
import './promotion-intake';
import './pool-resize-intake';
import './provisioning-run.activities';
import './provisioning-run.orchestrator';
import './runs';
import './stacks';
import './runner-jobs';
import './delivery-reports';
