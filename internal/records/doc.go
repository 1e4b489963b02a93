// Package records writes what a fleet's workers write for a job: its
// result into RESULTS (cut to fit the server, first writer wins), its
// events onto events.<id>, its records in the job index, INDEX, and the
// next head of its workspace. The records are pkg/jobs' wire types; a
// client only reads them.
package records
