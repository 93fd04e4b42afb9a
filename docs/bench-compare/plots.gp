set terminal pngcairo noenhanced size 900,520 font ',11'
set grid
set key bottom right
set output 'latency-0.png'
set title 'commit-to-client latency, 1 stream'
set logscale x
set xlabel 'latency (ms, log scale)'
set ylabel 'fraction of deliveries at or below'
set yrange [0:1]
plot 'lat-consoled-0.dat' using 1:2 with lines lw 2 title 'consoled', 'lat-consoled__CONSOLED_STREAM_DIRECT_false-0.dat' using 1:2 with lines lw 2 title 'consoled (CONSOLED_STREAM_DIRECT=false)', 'lat-async-ref-0.dat' using 1:2 with lines lw 2 title 'async-ref'
set output 'latency-1.png'
set title 'commit-to-client latency, 1000 × 50/s'
set logscale x
set xlabel 'latency (ms, log scale)'
set ylabel 'fraction of deliveries at or below'
set yrange [0:1]
plot 'lat-consoled-1.dat' using 1:2 with lines lw 2 title 'consoled', 'lat-consoled__CONSOLED_STREAM_DIRECT_false-1.dat' using 1:2 with lines lw 2 title 'consoled (CONSOLED_STREAM_DIRECT=false)', 'lat-async-ref-1.dat' using 1:2 with lines lw 2 title 'async-ref'
set output 'latency-2.png'
set title 'commit-to-client latency, 5000 × 10/s'
set logscale x
set xlabel 'latency (ms, log scale)'
set ylabel 'fraction of deliveries at or below'
set yrange [0:1]
plot 'lat-consoled-2.dat' using 1:2 with lines lw 2 title 'consoled', 'lat-consoled__CONSOLED_STREAM_DIRECT_false-2.dat' using 1:2 with lines lw 2 title 'consoled (CONSOLED_STREAM_DIRECT=false)', 'lat-async-ref-2.dat' using 1:2 with lines lw 2 title 'async-ref'
set output 'latency-threads-1000.png'
set title 'commit-to-client latency, 1000 × 50/s, a client thread per stream'
set logscale x
set xlabel 'latency (ms, log scale)'
set ylabel 'fraction of deliveries at or below'
set yrange [0:1]
plot 'lat-consoled-threads-1000.dat' using 1:2 with lines lw 2 title 'consoled', 'lat-consoled__CONSOLED_STREAM_DIRECT_false-threads-1000.dat' using 1:2 with lines lw 2 title 'consoled (CONSOLED_STREAM_DIRECT=false)', 'lat-async-ref-threads-1000.dat' using 1:2 with lines lw 2 title 'async-ref'
set output 'latency-threads-5000.png'
set title 'commit-to-client latency, 5000 × 10/s, a client thread per stream'
set logscale x
set xlabel 'latency (ms, log scale)'
set ylabel 'fraction of deliveries at or below'
set yrange [0:1]
plot 'lat-consoled-threads-5000.dat' using 1:2 with lines lw 2 title 'consoled', 'lat-consoled__CONSOLED_STREAM_DIRECT_false-threads-5000.dat' using 1:2 with lines lw 2 title 'consoled (CONSOLED_STREAM_DIRECT=false)', 'lat-async-ref-threads-5000.dat' using 1:2 with lines lw 2 title 'async-ref'
set output 'latency-neighbours-1000.png'
set title 'commit-to-client latency, 1000 × 50/s, 2 CPU-bound neighbours'
set logscale x
set xlabel 'latency (ms, log scale)'
set ylabel 'fraction of deliveries at or below'
set yrange [0:1]
plot 'lat-consoled-neighbours-1000.dat' using 1:2 with lines lw 2 title 'consoled', 'lat-consoled__CONSOLED_STREAM_DIRECT_false-neighbours-1000.dat' using 1:2 with lines lw 2 title 'consoled (CONSOLED_STREAM_DIRECT=false)', 'lat-async-ref-neighbours-1000.dat' using 1:2 with lines lw 2 title 'async-ref'
set output 'latency-neighbours-5000.png'
set title 'commit-to-client latency, 5000 × 10/s, 2 CPU-bound neighbours'
set logscale x
set xlabel 'latency (ms, log scale)'
set ylabel 'fraction of deliveries at or below'
set yrange [0:1]
plot 'lat-consoled-neighbours-5000.dat' using 1:2 with lines lw 2 title 'consoled', 'lat-consoled__CONSOLED_STREAM_DIRECT_false-neighbours-5000.dat' using 1:2 with lines lw 2 title 'consoled (CONSOLED_STREAM_DIRECT=false)', 'lat-async-ref-neighbours-5000.dat' using 1:2 with lines lw 2 title 'async-ref'
set output 'memory.png'
set title 'server RSS per open stream'
set logscale x
set xlabel 'streams open (log scale)'
set ylabel 'KiB per stream (RSS above the idle server)'
set yrange [0:*]
set key top right
plot 'mem-consoled.dat' using 1:2 with linespoints title 'consoled', 'mem-consoled__CONSOLED_STREAM_DIRECT_false.dat' using 1:2 with linespoints title 'consoled (CONSOLED_STREAM_DIRECT=false)', 'mem-async-ref.dat' using 1:2 with linespoints title 'async-ref'
