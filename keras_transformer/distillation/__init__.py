"""Teacher to student: a corpus translated by teachers (an ensemble) as a resumable, sharded
data job, whose output trains a student."""
