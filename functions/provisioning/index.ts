// The provisioning module's functions register here.
import './promotion-intake';
import './provisioning-run.activities';
import './provisioning-run.orchestrator';
import './runs';
