// What netCDF-Java (the library in Panoply, IDV and THREDDS) sees at a DAP URL: every variable with its
// dimensions and attributes, then each asked section's shape and values, one per line.
// Usage: java -cp netcdf-4.2.jar:. NcjRead [--sections] dods://host/opendap/ds [name or name?section ...]
// A section is netCDF-Java's "start:stop:stride,..." (stop inclusive). By default netCDF-Java reads a small
// dataset whole when it opens it (its preload) and cuts sections itself, as Panoply does; --sections turns the
// preload and the per-variable cache off, so each section is asked of the server as a DAP2 constraint.
import ucar.ma2.Array;
import ucar.ma2.IndexIterator;
import ucar.nc2.Attribute;
import ucar.nc2.Dimension;
import ucar.nc2.NetcdfFile;
import ucar.nc2.Variable;
import ucar.nc2.dataset.NetcdfDataset;

public class NcjRead {
  public static void main(String[] args) throws Exception {
    int first = 0;
    boolean sections = args[0].equals("--sections");
    if (sections) {
      ucar.nc2.dods.DODSNetcdfFile.setPreload(false);
      first = 1;
    }
    // --sections opens the file without netCDF-Java's enhancement layer, whose variables read whole
    NetcdfFile ds = sections ? NetcdfDataset.openFile(args[first], null) : NetcdfDataset.openDataset(args[first]);
    try {
      for (Variable v : ds.getVariables()) {
        StringBuilder line = new StringBuilder("VAR " + v.getName() + " " + v.getDataType());
        for (Dimension d : v.getDimensions()) line.append(' ').append(d.getName()).append('=').append(d.getLength());
        System.out.println(line);
        for (Attribute a : v.getAttributes()) {
          System.out.println("ATT " + v.getName() + " " + a.getName() + " "
              + (a.isString() ? a.getStringValue() : a.getNumericValue()));
        }
      }
      for (int i = first + 1; i < args.length; i++) {
        String[] spec = args[i].split("\\?", 2);
        Variable v = ds.findVariable(spec[0]);
        if (v == null) throw new IllegalArgumentException("no variable " + spec[0]);
        if (sections) v.setCaching(false);
        Array a = spec.length > 1 ? v.read(spec[1]) : v.read();
        StringBuilder out = new StringBuilder("DATA " + spec[0]);
        for (int s : a.getShape()) out.append(' ').append(s);
        out.append('\n');
        IndexIterator it = a.getIndexIterator();
        while (it.hasNext()) out.append(it.getDoubleNext()).append('\n');
        System.out.print(out);
      }
    } finally {
      ds.close();
    }
  }
}
