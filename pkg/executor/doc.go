// Package executor runs one job in one ephemeral, hardened Docker container.
//
// Run returns a Result for every outcome of the job itself (succeeded,
// failed, timeout, oom, output_limit, canceled, and rejected for a job this
// executor cannot accept: an unknown preset, limits over the caps). It
// returns an error only for infrastructure failures (daemon unreachable,
// image missing), which wrap ErrInfrastructure so that the caller can back
// off and retry instead of charging the job.
package executor
