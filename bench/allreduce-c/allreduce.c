/* The C side of `make bench-allreduce`: the same in-place MPI_Allreduce of
 * float32 buffers that hdet's Go binding makes, timed the same way, so the
 * two can be compared. Prints "size median_seconds_per_call" on rank 0.
 * Past 16 MiB it times a fifth of REPS, at least 3 (a call takes seconds
 * there on a busy machine). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	int reps0 = atoi(argv[1]);
	for (int a = 2; a < argc; a++) {
		long n = atol(argv[a]);
		int reps = n > (1L << 22) ? (reps0 / 5 > 3 ? reps0 / 5 : 3) : reps0;
		long iters = 2000000 / n;
		if (iters < 1) iters = 1;
		if (iters > 200) iters = 200;
		float *buf = malloc(n * sizeof(float));
		for (long i = 0; i < n; i++) buf[i] = 1.0f;
		double *t = malloc(reps * sizeof(double));
		for (long i = 0; i < iters; i++) /* warm-up */
			MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		for (int r = 0; r < reps; r++) {
			MPI_Barrier(MPI_COMM_WORLD);
			double t0 = MPI_Wtime();
			for (long i = 0; i < iters; i++)
				MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
			double dt = (MPI_Wtime() - t0) / iters;
			MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
			t[r] = dt;
		}
		qsort(t, reps, sizeof(double), cmp);
		if (rank == 0) printf("%ld %.9g\n", n, t[reps / 2]);
		free(t);
		free(buf);
	}
	MPI_Finalize();
	return 0;
}
